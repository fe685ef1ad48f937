"""A real `veri train` step (local sandboxes, capture proxy, hf policy, TRL) exported and fine-tuned on: the
lines are the archive's rows, the tool results are masked, the side call is a row of its own, the loss falls."""

from __future__ import annotations

import json

import pytest
import yaml

from testkit.trainer_jobs import write_job, write_tasks
from tests.trainer.conftest import stack, trainer_script  # noqa: F401 (fixtures)
from tests.trainer.test_train import veri_train
from veri.archive import ArchiveIndex
from veri.cli import main

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]


def test_a_trained_step_exported_and_fine_tuned_on(stack, tiny_model, tmp_path, capsys):  # noqa: F811
    job = write_job(tmp_path / "job", tiny_model, max_steps=1)
    write_tasks(job.parent / "tasks.jsonl", [
        {"prompt": "Look up the answer, please.", "expected": "beta", "side_call": True},
        {"prompt": "Look up the answer now.", "expected": "alpha", "side_call": True, "fail_rollout": 1},
    ])
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    out = tmp_path / "rows.jsonl"
    assert main(["export", "sft", "job", "--output", str(tmp_path / "jobs"), "--out", str(out)]) == 0
    assert "rollouts left out: not_trained 1" in capsys.readouterr().out  # the crashed rollout
    lines = [json.loads(line) for line in out.read_text().splitlines()]

    with ArchiveIndex(tmp_path / "jobs" / "job") as index:
        records = sorted((index.read_rollout(row["path"]) for row in index.rollouts(limit=10)),
                         key=lambda r: (r.task_index, r.rollout_index))
    rows = [(record, row) for record in records if record.trainable for row in record.episode.rows]
    assert len(lines) == len(rows) == 6  # 3 trained rollouts x (main + title side call)
    for line, (record, row) in zip(lines, rows, strict=True):
        assert line["input_ids"] == row.prompt_ids + row.completion_ids
        assert line["completion_mask"] == [0] * len(row.prompt_ids) + row.env_mask
        assert (line["task_index"], line["rollout_index"], line["reward"]) == (
            record.task_index, record.rollout_index, record.reward.reward)
        assert line["messages"] and line["messages"][-1]["role"] == "assistant"
    assert sum(sum(line["completion_mask"]) for line in lines) == sum(r.tokens.trained for r in records)
    assert {line["row_kind"] for line in lines} == {"main", "side_call"}

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)

    def text(line: dict, bit: int) -> str:
        ids = zip(line["input_ids"], line["completion_mask"], strict=True)
        return tokenizer.decode([token for token, mask in ids if mask == bit])

    main_row = next(line for line in lines if line["row_kind"] == "main")
    assert "veri-answer-" in text(main_row, 0) and "veri-answer-" not in text(main_row, 1)  # the tool result
    assert "<tool_call>" in text(main_row, 1)  # what the policy sampled
    side = next(line for line in lines if line["row_kind"] == "side_call")
    assert "Lookup chat" in text(side, 1) and "Title this chat" in text(side, 0)

    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump({"model": str(tiny_model), "dataset": str(out), "learning_rate": 3e-3,
                                      "output_dir": str(tmp_path / "sft"), "batch_size": 6, "max_steps": 8}))
    assert main(["sft", str(config)]) == 0
    losses = [item["loss"] for item in json.loads((tmp_path / "sft" / "sft.json").read_text())["losses"]]
    assert len(losses) == 8 and losses == sorted(losses, reverse=True) and losses[-1] < 0.9 * losses[0], losses
