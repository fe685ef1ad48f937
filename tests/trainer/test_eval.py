"""`veri eval` for real, as a user runs it (a subprocess), on the tiny model: the trainer fixtures' policy
server and capture proxy, local sandboxes, the job's harness and reward; the eval archive read back by the
archive index and `veri debug`; --json, --compare, and the bad input it refuses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from testkit.trainer_jobs import write_job
from tests.trainer.test_train import veri_on_stack
from veri.archive import ArchiveIndex, read_metrics
from veri.services.console.app import create_app
from veri.services.console.settings import ConsoleSettings
from veri.services.policy.hf.admin_client import PolicyAdmin

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]


def veri_eval(job: Path, stack, output: Path, *extra: str) -> subprocess.CompletedProcess:
    return veri_on_stack("eval", job, stack, output, *extra)


def test_eval_scores_a_checkpoint_through_the_stack_and_archives_it(stack, tiny_model, tmp_path):
    job = write_job(tmp_path / "job", tiny_model)
    jobs = tmp_path / "jobs"
    # A training job's folder with a checkpoint of step 1 (the tiny model's own weights, as TRL saves them).
    checkpoint = jobs / "trained" / "checkpoints" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    for name in ("model.safetensors", "config.json"):
        shutil.copy(tiny_model / name, checkpoint / name)
    (jobs / "trained" / "job.json").write_text(json.dumps({"status": "finished", "model": str(tiny_model)}))
    before = sorted(p.relative_to(jobs / "trained") for p in (jobs / "trained").rglob("*"))

    result = veri_eval(job, stack, jobs, "--job", "trained", "--step", "1", "-n", "2", "--json", "--name", "ev1")
    assert result.returncode == 0, result.stderr[-6000:]
    summary = json.loads(result.stdout)
    # The scripted policy calls the tool, then answers "alpha" (even rollouts) or "beta beta" (odd); the
    # reward wants "beta". Task 1's second rollout crashes: rejected, left out of the figures.
    assert summary["checkpoint"] == "step-1" and summary["job"] == "trained" and summary["samples_per_task"] == 2
    assert summary["functions"] == ["reward", "reward_fn/reward"]  # the total, and the function named `reward`
    assert summary["rollouts"] == 4 and summary["scored"] == 3
    assert summary["rejected"] == {"harness_failed": 1}
    assert summary["reward_mean"]["reward"] == pytest.approx(1 / 3)
    low, high = summary["reward_ci"]["reward"]
    assert low <= 1 / 3 <= high
    # pass@1 over tasks: task 0 (1 of 2) 0.5, task 1 (0 of 1) 0; pass@2 only for task 0 (2 samples): 1.0.
    assert summary["pass_at_k"]["reward"] == {"1": pytest.approx(0.25), "2": pytest.approx(1.0)}
    assert [(t["task_index"], t["scored"], t["passed"]["reward"]) for t in summary["tasks"]] == [(0, 2, 1), (1, 1, 0)]
    assert PolicyAdmin(stack[0].url).policy_version() == 1  # the checkpoint's weights were loaded

    # The eval archive is a job-shaped folder of its own: the index, metrics, eval.json; the job is untouched.
    archive = jobs / "ev1"
    assert json.loads((archive / "eval.json").read_text())["reward_mean"] == summary["reward_mean"]
    assert sorted(p.relative_to(jobs / "trained") for p in (jobs / "trained").rglob("*")) == before
    assert read_metrics(archive / "metrics.jsonl")[0]["rollouts"] == 4
    with ArchiveIndex(archive) as index:
        rows = index.rollouts(limit=100)
        assert len(rows) == 4 and {row["step"] for row in rows} == {0}
        assert index.read_rollout(rows[0]["path"]).spans
    debug = subprocess.run([sys.executable, "-m", "veri.cli", "debug", str(archive / rows[0]["path"])],
                           capture_output=True, text=True, timeout=120)
    assert debug.returncode == 0, debug.stderr

    # The table, and a second eval compared with the first over the same tasks.
    base = veri_eval(job, stack, jobs, "--step", "base", "-n", "2", "--name", "ev-base")
    assert base.returncode == 0, base.stderr[-6000:]
    assert "pass@2" in base.stdout and "95% CI" in base.stdout
    assert "rejected (left out): harness_failed 1" in base.stdout
    # The base model lies outside the jobs folder (the stack's policy sees only that): a copy was loaded, then dropped.
    assert not any((jobs / "ev-base" / "weights").glob("*/*.safetensors"))
    compared = veri_eval(job, stack, jobs, "--compare", "ev1", str(jobs / "ev-base"), "--json")
    assert compared.returncode == 0, compared.stderr[-6000:]
    paired = json.loads(compared.stdout)["functions"]["reward"]
    assert paired["tasks"] == 2 and paired["difference"] == pytest.approx(0.0) and paired["p_value"] == 1.0

    # The console shows a job's evals on its page (and an eval archive is a job page of its own).
    with TestClient(create_app(ConsoleSettings(state_dir=tmp_path)), base_url="http://127.0.0.1") as console:
        page = console.get("/jobs/trained")
        assert page.status_code == 200 and 'id="evals"' in page.text
        assert 'href="/jobs/ev1"' in page.text and "step-1" in page.text and "0.333" in page.text
        assert "ev-base" not in page.text  # the base model's eval named no job
        assert console.get("/jobs/ev1").status_code == 200


def test_eval_refuses_bad_input_with_the_fix(stack, tiny_model, tmp_path):
    job = write_job(tmp_path / "job", tiny_model)
    jobs = tmp_path / "jobs"
    (jobs / "trained" / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (jobs / "trained" / "job.json").write_text("{}")

    typo = veri_eval(job, stack, jobs, "--compare", "ev-typo", "base")
    assert typo.returncode == 1 and "not an eval archive" in typo.stderr
    unknown_job = veri_eval(job, stack, jobs, "--job", "nope")
    assert unknown_job.returncode == 1 and "no job 'nope'" in unknown_job.stderr and "trained" in unknown_job.stderr
    unknown_step = veri_eval(job, stack, jobs, "--job", "trained", "--step", "7")
    assert unknown_step.returncode == 1
    assert "no checkpoint at step 7" in unknown_step.stderr and "steps 2" in unknown_step.stderr
    no_final = veri_eval(job, stack, jobs, "--job", "trained")
    assert no_final.returncode == 1 and "no final model" in no_final.stderr and "--step K" in no_final.stderr

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    split = veri_eval(job, stack, jobs, "--split", str(empty))
    assert split.returncode == 1 and "has no rows" in split.stderr and "--split" in split.stderr
    no_tasks = veri_eval(job, stack, jobs, "--tasks", "5:9")
    assert no_tasks.returncode == 1 and "selects no task" in no_tasks.stderr and "2 rows" in no_tasks.stderr
    cold = veri_eval(job, stack, jobs, "--temperature", "0")
    assert cold.returncode == 1 and "--temperature 0" in cold.stderr  # the proxy samples at 1

    # Never into a training job's folder.
    into_job = veri_eval(job, stack, jobs, "--name", "trained")
    assert into_job.returncode == 1 and "a training job's folder" in into_job.stderr
    assert sorted(p.name for p in (jobs / "trained").iterdir()) == ["checkpoints", "job.json"]

    # A reward function that raises: the eval fails naming it, after archiving what it ran.
    (job.parent / "reward.py").write_text("def reward(prompts, completions, **kw):\n    raise KeyError('oops')\n")
    broken = veri_eval(job, stack, jobs, "-n", "1", "--name", "broken")
    assert broken.returncode == 1 and "reward function 'reward' raised KeyError" in broken.stderr
    assert "fix the function" in broken.stderr and (jobs / "broken" / "eval.json").is_file()
