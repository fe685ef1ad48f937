"""`veri train` on the Claude Code bundle (the real, pinned `claude` binary, unmodified) in local
sandboxes: Claude Code hands each task to a sub-agent with its Agent tool, and two GRPO steps train
every token the policy sampled, in the main conversation's row and the sub-agent's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.demo.conftest import BUNDLES, SUB_AGENT_PAGE, image_bin, sub_agent_rules
from tests.servers import start_server
from tests.trainer.conftest import write_tasks
from veri.core.episodes import RowKind
from veri.trainer.archive import ArchiveIndex, read_metrics
from veri.webfixture.pages import task

pytestmark = pytest.mark.slow

REPO = BUNDLES.parent
# Claude Code's requests are ~21k tokens (its system prompt and tool list): on the 2-core dev box a step's
# four ~22k-token rows take ~240 s of the tiny model's forward and backward passes (a step ~290 s, the
# test ~560 s).
TIMEOUT_S = 900


def test_claude_code_sub_agent_rollouts_train_every_sampled_token(tiny_model, tmp_path, monkeypatch):
    # The image's `claude` (the host's pinned binary) on PATH, which local sandboxes pass on.
    monkeypatch.setenv("PATH", os.pathsep.join([*image_bin("veri/base-claude-agent", tmp_path), os.environ["PATH"]]))
    with start_server(["serve", "webfixture"]) as webfixture:
        row = task(SUB_AGENT_PAGE, base=webfixture.url)
        script = tmp_path / "script.json"
        script.write_text(json.dumps(sub_agent_rules(row)))
        job = tmp_path / "job" / "job.yaml"
        job.parent.mkdir()
        write_tasks(job.parent / "tasks.jsonl", [row])
        job.write_text(yaml.safe_dump({
            "model": str(tiny_model), "backend": "hf", "dataset": {"path": "tasks.jsonl"},
            "harness_bundle": str(BUNDLES / "url_extract_claude"), "harness_protocol": "anthropic",
            "rewards": [{"file": str(REPO / "config/rewards/url_extract.py")}], "rollouts_per_prompt": 2,
            "max_response_length": 4096, "sampling": {"max_tokens": 256}, "learning_rate": 1e-4, "max_steps": 2,
            "max_turns": 4, "harness_timeout_s": 240,
            # One row a micro-batch (no row padded to another's length) and no activation recompute.
            "grpo": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 2,
                     "gradient_checkpointing": False},
        }))
        policy_args = ["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script),
                       "--threads", "1"]
        with start_server(policy_args) as policy:
            proxy_args = ["serve", "proxy", "--policy-url", policy.url, "--model", str(tiny_model),
                          "--store", str(tmp_path / "spans"), "--max-tokens", "256"]
            with start_server(proxy_args) as proxy:
                result = subprocess.run(
                    [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--proxy-url",
                     proxy.url, "--policy-url", policy.url, "--output", str(tmp_path / "jobs"), "--base-dir",
                     str(job.parent)], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-6000:]

    job_dir = tmp_path / "jobs" / "job"
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1]
    for line in metrics:
        assert line["rollouts"] == line["trainable"] == 2
        assert line["tokens/dropped_fraction"] == 0 and line["train/rows/branch_rows"] >= 2
    with ArchiveIndex(job_dir) as index:
        records = [index.read_rollout(entry["path"]) for entry in index.rollouts(limit=10)]
    assert len(records) == 4
    for record in records:
        episode = record.episode
        kinds = [branch.kind for branch in episode.branches]
        assert episode.chain_kind == RowKind.MAIN and RowKind.SUB_AGENT in kinds, record.tokens.line()
        assert set(kinds) <= {RowKind.SUB_AGENT, RowKind.SIDE_CALL}
        account = record.tokens
        assert account.sampled == account.trained > 0 and account.dropped == {}, account.line()
