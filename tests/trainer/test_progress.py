"""Step metrics reach the archive once per step, before TRL could checkpoint the step."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from tests.trainer.records import failed, scored
from veri.services.trainer.ui.bars import TrainingBars, use_bars
from veri.services.trainer.ui.progress import StepMetricsCallback, StepProgress


class FakeArchive:
    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict]] = []
        self.lines: list[str] = []

    def write_step_metrics(self, step: int, metrics: dict) -> None:
        self.metrics.append((step, metrics))

    def log(self, message: str) -> None:
        self.lines.append(message)


def test_a_logged_step_carries_trl_logs_and_an_unlogged_one_is_written_at_step_end():
    archive = FakeArchive()
    progress = StepProgress(archive)
    callback = StepMetricsCallback(progress)

    progress.begin(0, [scored(0, 0, 1.0), failed(0, 1)], {"rollout": 1.0, "reward": 0.5}, {"x": 1})
    progress.timing("weight_sync", 0.25)
    callback.on_step_end(None, None, SimpleNamespace(should_log=True))
    assert archive.metrics == []  # waits for TRL's log of this step
    callback.on_log(None, None, None, logs={"loss": 0.5, "grad_norm": 2.0, "note": "text"})
    [(step, metrics)] = archive.metrics
    assert step == 0 and metrics["train/loss"] == 0.5 and metrics["train/grad_norm"] == 2.0
    assert metrics["trainable"] == 1 and metrics["x"] == 1 and metrics["time/weight_sync_s"] == 0.25
    assert "time/train_s" in metrics and "train/note" not in metrics
    assert archive.lines == ["step 0: 1/2 rollouts trainable, reward mean 1, loss 0.5"]

    progress.begin(1, [scored(0, 0, 0.0)], {"rollout": 1.0}, {})
    callback.on_step_end(None, None, SimpleNamespace(should_log=False))
    assert [s for s, _ in archive.metrics] == [0, 1]
    callback.on_train_end(None, None, None)  # nothing left to write
    assert len(archive.metrics) == 2


def test_bars_count_steps_and_rollouts_and_print_step_lines_above_them():
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    bars = TrainingBars(console)
    progress = StepProgress(FakeArchive(), display=bars)
    state = SimpleNamespace(max_steps=3, global_step=1)  # a resumed job starts at its checkpoint
    bars.on_train_begin(None, state, None)
    [steps] = bars.bars.tasks
    assert (steps.total, steps.completed) == (3, 1)

    progress.rollouts_started(1, 8)
    progress.rollouts_done(4)
    progress.rollouts_done(4)
    rollouts = bars.bars.tasks[1]
    assert (rollouts.total, rollouts.completed, rollouts.description) == (8, 8, "step 2 rollouts")
    progress.begin(1, [scored(0, 0, 1.0)], {"rollout": 1.0}, {})
    StepMetricsCallback(progress).on_step_end(None, None, SimpleNamespace(should_log=False))
    state.global_step = 2
    bars.on_step_end(None, state, None)
    assert bars.bars.tasks[0].completed == 2
    progress.rollouts_started(2, 8)
    assert (bars.bars.tasks[1].completed, bars.bars.tasks[1].description) == (0, "step 3 rollouts")
    bars.on_train_end(None, state, None)
    bars.stop()  # idempotent (an interrupted run stops them too)
    assert "step 1: 1/1 rollouts trainable, reward mean 1 (rollout 1.0s" in console.file.getvalue()


def test_bars_replace_transformers_tqdm_bar():
    from transformers.trainer_callback import CallbackHandler, ProgressCallback

    handler = CallbackHandler([ProgressCallback()], None, None, None, None)
    trainer = SimpleNamespace(remove_callback=handler.remove_callback, add_callback=handler.add_callback)
    bars = TrainingBars(Console(file=io.StringIO()))
    use_bars(trainer, bars)
    assert handler.callbacks == [bars]


def test_an_async_step_line_names_the_work_its_stale_rollouts_cost():
    archive = FakeArchive()
    progress = StepProgress(archive)
    waste = {"staleness/max": 1, "rollouts/stale_dropped": 2, "tokens/stale_dropped": 40,
             "tokens/stale_dropped_fraction": 0.2, "sandbox_s/stale_dropped": 6.2}
    progress.begin(3, [scored(0, 0, 1.0)], {"rollout": 1.0}, waste)
    StepMetricsCallback(progress).on_step_end(None, None, SimpleNamespace(should_log=False))
    [(_, metrics)] = archive.metrics
    assert {key: metrics[key] for key in waste} == waste  # in the archive's metrics line, as the console reads them
    assert archive.lines == ["step 3: 1/1 rollouts trainable, reward mean 1, staleness max 1,"
                             " 2 stale rollouts dropped (40 sampled tokens, 6 sandbox-s)"]
