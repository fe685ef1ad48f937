"""`veri sft CONFIG`: TRL's SFTTrainer on exported rows. The tiny model's loss falls; tokens whose
completion_mask is 0 (prompt, environment) carry no loss; the config is checked as a whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.export.archive import JOB, write_archive
from veri.cli import main
from veri.core.problems import ProblemsError
from veri.tools.export.errors import ExportError
from veri.tools.export.sft import SUMMARY_FILE, load_sft_config, read_rows, sft_trainer

TINY = os.environ.get("VERI_TINY_MODEL")
needs_tiny = pytest.mark.skipif(not TINY, reason="VERI_TINY_MODEL is not set (make tiny-model)")


@pytest.fixture
def rows_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    write_archive(tmp_path / "jobs")
    out = tmp_path / "rows.jsonl"
    assert main(["export", "sft", JOB, "--output", str(tmp_path / "jobs"), "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def sft_file(tmp_path: Path, rows: Path, **values: object) -> Path:
    config = {"model": TINY, "dataset": str(rows), "output_dir": str(tmp_path / "sft"), **values}
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@needs_tiny
def test_fine_tuning_on_exported_rows_lowers_the_loss(tmp_path: Path, rows_file: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    config = sft_file(tmp_path, rows_file, learning_rate=3e-3, batch_size=6, max_steps=12)
    assert main(["sft", str(config)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "sft" / SUMMARY_FILE).read_text())
    losses = [item["loss"] for item in summary["losses"]]
    assert summary["steps"] == 12 and len(losses) == 12 and summary["rows"] == 6
    assert losses[-1] < 0.8 * losses[0] and losses == sorted(losses, reverse=True), losses  # one batch: every row
    assert "6 rows, 55 tokens, 26 trained" in printed and "loss" in printed

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")  # the saved folder is a model again
    assert model.config.vocab_size == 6000 and (tmp_path / "sft" / "tokenizer.json").is_file()


@needs_tiny
def test_masked_tokens_carry_no_loss(tmp_path: Path, rows_file: Path) -> None:
    import torch

    config = load_sft_config(sft_file(tmp_path, rows_file, batch_size=6))
    exported = read_rows(config.dataset)
    trainer = sft_trainer(config)
    prepared = trainer.train_dataset
    assert "completion_mask" not in prepared.column_names  # folded into labels by TRL, not ignored
    by_ids = {tuple(ids): mask for ids, mask in zip(exported["input_ids"], exported["completion_mask"], strict=True)}
    for ids, labels in zip(prepared["input_ids"], prepared["labels"], strict=True):
        mask = by_ids[tuple(ids)]
        assert labels == [token if bit else -100 for token, bit in zip(ids, mask, strict=True)]

    batch = trainer.data_collator([prepared[i] for i in range(len(prepared))])
    model = trainer.model.eval()
    with torch.no_grad():
        loss = model(**batch).loss
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    # the mean next-token loss over the sampled tokens alone, from the exported masks (padding: mask 0)
    width = batch["input_ids"].shape[1]
    masks = torch.tensor([by_ids[tuple(ids)] + [0] * (width - len(ids)) for ids in prepared["input_ids"]])
    picked = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    weight = masks[:, 1:].float()
    by_hand = -(picked * weight).sum() / weight.sum()
    assert torch.allclose(loss, by_hand, atol=1e-5), (loss, by_hand)
    everything = -(picked * (batch["attention_mask"][:, 1:].float())).sum() / batch["attention_mask"][:, 1:].sum()
    assert not torch.allclose(loss, everything, atol=1e-3)  # the environment's tokens would change it


def test_the_config_is_checked_as_a_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({"model": str(tmp_path), "dataset": ["missing.jsonl"], "output_dir": "o",
                                    "lerning_rate": 1e-4, "batch_size": 0}))
    with pytest.raises(ProblemsError) as raised:
        load_sft_config(path)
    text = str(raised.value)
    assert "lerning_rate: is not a known key" in text and "learning_rate" in text and "batch_size" in text
    path.write_text(yaml.safe_dump({"model": str(tmp_path), "dataset": "missing.jsonl", "output_dir": "o"}))
    with pytest.raises(ProblemsError) as raised:
        load_sft_config(path)
    assert "no config.json" in str(raised.value) and "veri export sft JOB" in str(raised.value)
    assert main(["sft", str(path)]) == 1
    assert "veri sft: " in capsys.readouterr().err


def test_rows_that_are_no_export_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hello"}\n')
    with pytest.raises(ExportError, match="not a `veri export sft` line"):
        read_rows([bad])
    bad.write_text('{"input_ids": [1, 2, 7000], "completion_mask": [0, 1, 1]}\n')
    with pytest.raises(ExportError, match="outside the model's vocabulary"):
        read_rows([bad], vocab_size=6000)
    bad.write_text("\n")
    with pytest.raises(ExportError, match="no rows"):
        read_rows([bad])
