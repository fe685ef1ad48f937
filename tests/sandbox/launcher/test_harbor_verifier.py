"""Harbor tasks on the docker backend, real runsc: the task's image, the agent's turn in a namespace of
its own, then the verifier (launcher/docker_task.py). One group of small tasks (tests/fixtures/harbor/
verifier, in the plain veri/os-base image) runs once; each test reads its rollouts: rewards as the
tests wrote them, per-key rewards, an agent that hunts for the tests and forges the reward, a timed-out
agent that is still verified, and the verifier's three failures with their verdicts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.sandbox.conftest import ROOT
from veri.core.episodes import build_episode
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, TaskEnvironment, TaskHealthcheck
from veri.core.rules import Rule, VerifierError
from veri.services.launcher.group import run_group

TASKS = ROOT / "tests/fixtures/harbor/verifier"
IMAGE = "veri/os-base"


def task_launch(rollout_id: str, task: str, agent: str = "oracle", solution: Path | None = None,
                timeout_s: float = 60, **task_env) -> RolloutLaunch:
    folder = TASKS / task
    environment = TaskEnvironment(
        image=IMAGE, workdir="/app", agent=agent, tests_dir=str(folder / "tests"),
        solution_dir=str(solution or folder / "solution") if agent == "oracle" else None,
        verifier_timeout_s=task_env.pop("verifier_timeout_s", 60), **task_env)
    env = {"VERI_ROLLOUT_ID": rollout_id, "VERI_TASK": json.dumps({"task": task})}
    return RolloutLaunch(rollout_id=rollout_id, image=IMAGE, env=env, timeout_s=timeout_s,
                         labels={"job": "harbor-verifier-test"}, task_env=environment)


# A harness command run as the task's agent user; it exits 3 (a failed harness is still verified).
HARNESS = ('echo "$(id -un) $(grep CapEff /proc/self/status | tr -s \'\\t\' \' \') PATH=$PATH" >/tmp/agent.txt; '
           'echo "$VERI_ROLLOUT_ID" >"$VERI_OUTPUT_DIR/id.txt"; echo harness out; echo harness err >&2; exit 3')


def mounted_folders(root: Path) -> tuple[Path, Path]:
    """A verifier tools folder (bin/veri-probe) and a runtime tree (bin/), readable by any uid."""
    tools, runtime = root / "tools", root / "rt"
    for folder in (tools / "bin", tools / "shims", tools / "wheels", runtime / "bin"):
        folder.mkdir(parents=True)
    (tools / "bin/veri-probe").write_text("#!/bin/sh\necho vendored\n")
    for path in (tools, runtime, *tools.rglob("*"), *runtime.rglob("*")):
        path.chmod(0o755)
    return tools, runtime


@pytest.fixture(scope="module")
def results(backend, tmp_path_factory) -> dict[str, LaunchResult]:
    tools, runtime = mounted_folders(tmp_path_factory.mktemp("mounted"))
    group = GroupLaunch(max_parallel=4, launches=[
        task_launch("users", "users", agent="harness", harness_command=["sh", "-c", HARNESS], agent_user="nobody",
                    verifier_user="nobody", tools_dir=str(tools), runtime_tree=str(runtime),
                    env={"TASK_VAR": "task"}, verifier_env={"VERIFIER_VAR": "verifier"}),
        task_launch("hello-oracle", "hello"),
        task_launch("hello-nop", "hello", agent="nop"),
        task_launch("multi-oracle", "multi-reward"),
        task_launch("attack", "hello", solution=TASKS / "agents/attack"),
        task_launch("overrun", "hello", solution=TASKS / "agents/overrun", agent_timeout_s=4),
        task_launch("slow", "verifier-slow", agent="nop", verifier_timeout_s=2),
        task_launch("silent", "verifier-silent", agent="nop"),
        task_launch("nan", "verifier-nan", agent="nop"),
        task_launch("ghost", "hello", agent="nop", agent_user="ghost"),
        task_launch("healthy", "hello", agent="nop", healthcheck=TaskHealthcheck(  # fails once, in its start period
            command="test -e /tmp/ready || { touch /tmp/ready; exit 1; }", start_period_s=30, start_interval_s=0.2,
            retries=1)),
        task_launch("unhealthy", "hello", agent="nop", healthcheck=TaskHealthcheck(
            command="echo not yet; exit 1", interval_s=0.2, retries=2)),
    ])
    out = tmp_path_factory.mktemp("harbor-out")
    return {r.rollout_id: r for r in asyncio.run(run_group(backend, group, out))}


def summary(result: LaunchResult) -> str:
    return result.model_dump_json(indent=1, exclude={"verifier": {"files"}})[:4000]


def test_rewards_are_what_the_tests_wrote(results):
    solved, untouched = results["hello-oracle"], results["hello-nop"]
    for result, reward in ((solved, 1.0), (untouched, 0.0)):  # a 0 only from tests that ran and said 0
        assert result.status == "completed" and result.exit_code == 0, summary(result)
        assert result.verifier is not None and result.verifier.error is VerifierError.NONE, summary(result)
        assert result.verifier.reward == reward and result.verifier.rewards == {"reward": reward}
        assert result.verifier.exit_code == 0
        assert "checked /app/hello.txt" in result.verifier.files["test-stdout.txt"]
        assert set(result.verifier.files) == {"reward.txt", "test-stdout.txt"}


def test_reward_json_gives_per_key_rewards_offline(results):
    verified = results["multi-oracle"].verifier
    assert verified is not None and verified.error is VerifierError.NONE, summary(results["multi-oracle"])
    assert verified.rewards == {"correctness": 1.0, "performance": 0.5} and verified.reward is None
    assert verified.ignored_keys == ["note"]
    # The verifier runs with every network taken off the sandbox: only loopback is left.
    assert "interfaces: lo \n" in verified.stdout_tail, verified.stdout_tail


def test_an_agent_finds_no_tests_and_cannot_forge_the_reward(results):
    attack = results["attack"]
    out = Path(attack.output_dir)
    assert attack.status == "completed", summary(attack)
    assert "CapEff: 0000000000000000" in (out / "whoami.txt").read_text()
    # Its leftover process forged until the sandbox was removed (the verifier's 3 s and more); the tests
    # still said 0 (it never solved the task).
    attempts = (out / "attempts.txt").read_text()
    assert "forger done" not in attempts and attempts.count("reward.txt: Read-only file system") >= 3, attempts
    assert "busy" in attempts, attempts  # the mount points cannot be renamed away
    found = (out / "found.txt").read_text()
    assert set(found.split()) == {"/tmp/decoy"}, found  # its own decoy (the search works), never the tests
    verified = attack.verifier
    assert verified is not None and verified.error is VerifierError.NONE, summary(attack)
    assert verified.reward == 0.0 and verified.rewards == {"reward": 0.0}, summary(attack)
    assert "reward.json" not in verified.files


def test_a_timed_out_agent_is_still_verified(results):
    overrun = results["overrun"]
    assert overrun.status == "truncated" and overrun.exit_code is None, summary(overrun)
    assert "solved, now hanging" in overrun.stdout_tail and "agent's timeout (4 s)" in overrun.stderr_tail
    assert overrun.verifier is not None and overrun.verifier.reward == 1.0, summary(overrun)


def test_a_harness_as_the_agent_user_and_a_verifier_as_its_own(results):
    users = results["users"]
    assert users.status == "failed" and users.exit_code == 3, summary(users)  # failed, and still verified
    assert users.stdout_tail == "harness out\n" and users.stderr_tail == "harness err\n"
    assert (Path(users.output_dir) / "id.txt").read_text() == "users\n"  # the contract and VERI_OUTPUT_DIR
    assert users.verifier is not None and users.verifier.reward == 1.0, summary(users)
    seen = users.verifier.stdout_tail
    assert "agent was: nobody CapEff: 0000000000000000 PATH=" in seen and ":/veri/rt/bin\n" in seen, seen
    assert "verifier: nobody CapEff: 0000000000000000" in seen, seen  # a non-root user keeps no capability
    assert "tool: vendored UV_OFFLINE=1 HOME=/veri/verify/home TASK_VAR=task VERIFIER_VAR=verifier" in seen, seen
    assert "contract leaked: no" in seen, seen  # the harness contract (its API key among it) is the agent's only


def test_an_agent_user_the_image_lacks_is_the_tasks_fault(results):
    ghost = results["ghost"]
    assert ghost.status == "failed" and ghost.verifier is None, summary(ghost)
    assert ghost.infrastructure_error == ("the task's sandbox could not start the agent: the agent user ghost is "
                                          "not in the image"), summary(ghost)


def test_the_healthcheck_runs_before_the_agent(results):
    healthy, unhealthy = results["healthy"], results["unhealthy"]
    assert healthy.status == "completed" and healthy.verifier is not None, summary(healthy)
    assert healthy.verifier.reward == 0.0
    assert unhealthy.status == "failed" and unhealthy.verifier is None, summary(unhealthy)
    assert unhealthy.infrastructure_error.startswith("the task's healthcheck did not pass (2 tries after its start "
                                                     "period; the last: exit 1: not yet)"), summary(unhealthy)


@pytest.mark.parametrize(("rollout", "error", "rule", "words"), [
    ("slow", VerifierError.TIMEOUT, Rule.VERIFIER_TIMEOUT, "timeout_sec (2 s)"),
    ("silent", VerifierError.NO_REWARD, Rule.VERIFIER_NO_REWARD, "neither /logs/verifier/reward.txt nor"),
    ("nan", VerifierError.ERROR, Rule.VERIFIER_ERROR, "'nan', not a finite number"),
])
def test_a_verifier_without_a_reward_gets_its_verdict(results, rollout, error, rule, words):
    result = results[rollout]
    assert result.status == "completed" and result.verifier is not None, summary(result)
    assert result.verifier.error is error and result.verifier.reward is None, summary(result)
    assert words in result.verifier.message, result.verifier.message
    episode = build_episode([], result.status, exit_code=result.exit_code, verifier=result.verifier)
    verdict = next(v for v in episode.verdicts if v.rule == rule)
    assert episode.rejected and verdict.effect == "reject" and words in verdict.message
