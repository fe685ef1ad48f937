"""What a user watches while `veri train` runs: rich progress bars, and the step lines above them.

Two bars: the job's optimizer steps, and the current step's rollouts (advanced as each GRPO group's
rollouts come back). They replace transformers' tqdm bar, which would also print every log dict. The
one summary line per step (`StepProgress`) goes through the same console, above the bars. On a
console that is not a terminal (CI, a piped log) rich draws no live bars: only the lines remain.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ProgressCallback


class TrainingBars(TrainerCallback):
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.bars = Progress(SpinnerColumn(), TextColumn("{task.description:<18}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                             console=self.console, transient=False)
        self._steps: TaskID | None = None
        self._rollouts: TaskID | None = None

    # --- lines and rollouts (the rollout function and StepProgress) -----------------------------

    def print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def rollouts_started(self, step: int, total: int) -> None:
        if self._rollouts is None:
            self._rollouts = self.bars.add_task("rollouts", total=total)
        self.bars.reset(self._rollouts, total=total, description=f"step {step + 1} rollouts")

    def rollouts_done(self, count: int) -> None:
        if self._rollouts is not None:
            self.bars.advance(self._rollouts, count)

    # --- TRL's loop ---------------------------------------------------------------------------------

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kw: Any) -> None:
        self._steps = self.bars.add_task("steps", total=state.max_steps, completed=state.global_step)
        self.bars.start()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kw: Any) -> None:
        if self._steps is not None:
            self.bars.update(self._steps, completed=state.global_step)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kw: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Idempotent; also what an interrupted run calls, so the terminal is left clean."""
        self.bars.stop()


def use_bars(trainer: Any, bars: TrainingBars) -> None:
    """Swap transformers' tqdm bar (and its log-dict printing) for `bars`."""
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(bars)
