"""Step metrics reach the archive once per step, before TRL could checkpoint the step."""

from __future__ import annotations

from types import SimpleNamespace

from tests.trainer.records import failed, scored
from veri.trainer.progress import StepMetricsCallback, StepProgress


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
