"""`make train` on a Harbor task through the whole stack, with Claude Code as the agent: the host builds the
task's image, the bundle's runtime tree (Claude Code among it) and the verifier's tools and stages the tests
(`veri tasks stage`), the trainer container (no Docker) reads what was staged, the launcher service runs each
rollout in the task's own image under runsc, then the task's hidden tests, and the verifier's reward trains.
The session stack's scripted policy (conftest.HARBOR_CLAUDE_RULES) makes Claude Code hand the task to a
sub-agent whose Bash command does it: a reward of 1 can come only from the tests, and each rollout has two
chains, both trained, every sampled token exactly once. (The Claude Code URL bundle runs through the stack in
test_run_harness.py; its sub-agent's rows live in tests/demo/test_bundles.py and the replayed recordings.)"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.stack.conftest import REPO
from veri.archive import read_metrics
from veri.core.episodes import RowKind
from veri.core.rollout_record import RolloutRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # make train may rebuild veri/runtime first

HARBOR_JOB = "tests/stack/harbor_claude_job/job.yaml"
TASK = "config/data/harbor_cpu/train/write-word-cloud"


def test_make_train_runs_claude_code_in_a_harbor_tasks_image_and_trains_every_branch_on_its_verifier(stack):
    name = f"harbor-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={HARBOR_JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    staged = json.loads((stack.state / "configs" / f"{name}.tasks.json").read_text())
    [(folder, entry)] = staged["tasks"].items()
    assert folder == TASK, staged
    tasks_build = (REPO / "build" / "tasks").resolve()
    assert entry["tests_dir"].startswith(f"{tasks_build}/staged/"), entry  # where the launcher reads it
    assert entry["image_config"]["workdir"] is not None, entry  # what a launcher with no Docker runs with

    job = stack.state / "jobs" / name
    metrics = read_metrics(job / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0], metrics
    for step, line in enumerate(metrics):
        assert line["reward_fn/verifier/mean"] == 1.0, line
        assert line.get("verifier/verified") == 2 and line.get("verifier/failed") == 0, line
        assert line["tokens/dropped_fraction"] == 0, line
        found = sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))
        records = [(RolloutRecord.model_validate_json(path.read_text()), path) for path in found]
        assert len(records) == 2
        # What the trainer handed TRL besides the rows in its own slots: every record's branches.
        assert line["train/rows/branch_rows"] == sum(len(r.episode.branches) for r, _ in records) >= 2
        for record, path in records:
            assert record.status == "completed" and record.trainable, (path, record.verdicts)
            assert record.verifier is not None and record.verifier.ran and record.verifier.reward == 1.0, \
                record.verifier
            assert record.reward is not None and record.reward.reward == 1.0, record.reward
            assert (path.with_suffix("") / "verifier" / "reward.txt").read_text().strip() == "1"
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
