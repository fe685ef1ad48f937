"""`make train` on the Claude Code bundle through the whole stack: the real, pinned `claude` (unmodified, in
veri/base-claude-agent) in gVisor sandboxes from the launcher service, the stack's proxy and policy, the
trainer container. Claude Code hands its task to a sub-agent with its Agent tool (the stack's scripted
replies), and two GRPO steps train every token the policy sampled, in the main conversation's row and the
sub-agent's, exactly once."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.stack.conftest import REPO, SUB_AGENT_TASK, dataset_row
from veri.core.episodes import RowKind
from veri.core.rollout_record import RolloutRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # make train may rebuild veri/runtime first

JOB = "tests/stack/claude_job/job.yaml"


def test_make_train_claude_code_sub_agent_trains_every_sampled_token(stack):
    # The stack's script makes Claude Code start a sub-agent for exactly this row.
    [row] = [json.loads(line) for line in (REPO / JOB).with_name("tasks.jsonl").read_text().splitlines()]
    assert row == dataset_row(SUB_AGENT_TASK)
    name = f"ci-claude-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"

    job = stack.state / "jobs" / name
    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for step, line in enumerate(metrics):
        records = [RolloutRecord.model_validate_json(p.read_text())
                   for p in sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))]
        assert line["rollouts"] == line["trainable"] == len(records) == 2
        assert line["tokens/dropped_fraction"] == 0
        # What the trainer handed TRL besides the rows in its own slots: every record's branches.
        assert line["train/rows/branch_rows"] == sum(len(r.episode.branches) for r in records) >= 2
        for record in records:
            assert record.status == "completed" and record.trainable, record.verdicts
            assert {span.policy_version for span in record.spans} == {step}
            assert record.reward.per_function["reward"] == 1.0  # the sub-agent's answer, passed on
            episode = record.episode
            kinds = [branch.kind for branch in episode.branches]
            assert episode.chain_kind == RowKind.MAIN and RowKind.SUB_AGENT in kinds, record.tokens.line()
            assert set(kinds) <= {RowKind.SUB_AGENT, RowKind.SIDE_CALL}  # Claude Code's side calls, if any
            assert_every_sampled_token_in_one_row(record)
            account = record.tokens
            assert account.sampled == account.trained > 0 and account.dropped == {}, account.line()


def assert_every_sampled_token_in_one_row(record: RolloutRecord) -> None:
    """From the spans alone, not the token account: each span is in exactly one row, a row is its last
    span's exact sequence, and its trained tokens are its spans' completions with the sampler's logprobs."""
    spans = {span.request_index: span for span in record.spans}
    episode = record.episode
    rows = [(episode.chain, episode.row), *((branch.spans, branch.row) for branch in episode.branches)]
    assert sorted(index for chain, _ in rows for index in chain) == sorted(spans)
    for chain, row in rows:
        first, last = spans[chain[0]], spans[chain[-1]]
        assert row.prompt_ids == first.prompt_token_ids
        assert row.prompt_ids + row.completion_ids == last.prompt_token_ids + last.completion_token_ids
        trained = [i for i, mask in enumerate(row.env_mask) if mask]
        assert [row.completion_ids[i] for i in trained] == [t for i in chain for t in spans[i].completion_token_ids]
        assert [row.logprobs[i] for i in trained] == [lp for i in chain for lp in spans[i].completion_logprobs]
