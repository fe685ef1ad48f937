"""Harbor tasks on the kubernetes backend, real kubelet and runsc (kubernetes/task_run.py): each rollout is a
Job in the task's own image (the plain veri/os-base, already in the node's Docker), the agent's turn and
then the verifier are execs through the API. The small tasks of tests/fixtures/harbor/verifier run once as
one group, as tests/sandbox/launcher/test_harbor_verifier.py runs them on the docker backend; each test
reads its rollouts: the oracle scores 1 and doing nothing 0, per-key rewards offline, an agent that hunts
for the tests and leaves a process forging the reward, a timed-out agent still verified, the task's users
and the verifier's tools, a verifier without a reward, and nothing left in the namespace."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.kubernetes_cluster import KubeCluster, fresh_namespace
from tests.sandbox.launcher.test_harbor_verifier import HARNESS, TASKS, mounted_folders
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, SandboxLimits, TaskEnvironment
from veri.core.rules import VerifierError
from veri.services.launcher.group import run_group
from veri.services.launcher.kubernetes.backend import KubernetesBackend

pytestmark = pytest.mark.needs("docker")

IMAGE = "veri/os-base"
KEY = "sk-task-rollout-3e9d"


def task_launch(rollout_id: str, task: str, agent: str = "oracle", solution: Path | None = None,
                cpus: float = 0.25, **task_env) -> RolloutLaunch:
    folder = TASKS / task
    environment = TaskEnvironment(
        image=IMAGE, workdir="/app", agent=agent, tests_dir=str(folder / "tests"),
        solution_dir=str(solution or folder / "solution") if agent == "oracle" else None,
        verifier_timeout_s=task_env.pop("verifier_timeout_s", 60), **task_env)
    env = {"VERI_ROLLOUT_ID": rollout_id, "VERI_TASK": json.dumps({"task": task}), "OPENAI_API_KEY": KEY}
    # A small share: the kubelet's node is this 2-core machine (requests = limits, Guaranteed).
    return RolloutLaunch(rollout_id=rollout_id, image=IMAGE, env=env, timeout_s=90,
                         limits=SandboxLimits(cpus=cpus, memory_mb=512), labels={"job": "harbor-k8s-test"},
                         task_env=environment)


@pytest.fixture(scope="module")
def backend(k8s_kubelet_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[KubernetesBackend]:
    with fresh_namespace(k8s_kubelet_cluster) as namespace:
        made = KubernetesBackend(namespace=namespace, launcher_id="task-test",
                                 output_root=tmp_path_factory.mktemp("task-out"),
                                 kubeconfig=k8s_kubelet_cluster.kubeconfig, max_sandboxes=2)
        yield made
        made.close()


@pytest.fixture(scope="module")
def results(backend: KubernetesBackend, tmp_path_factory: pytest.TempPathFactory) -> dict[str, LaunchResult]:
    tools, runtime = mounted_folders(tmp_path_factory.mktemp("mounted"))
    group = GroupLaunch(max_parallel=2, launches=[
        task_launch("hello-oracle", "hello"),
        task_launch("hello-nop", "hello", agent="nop"),
        task_launch("attack", "hello", solution=TASKS / "agents/attack", cpus=1),  # its forger loops on
        task_launch("multi-oracle", "multi-reward"),
        task_launch("overrun", "hello", solution=TASKS / "agents/overrun", agent_timeout_s=4),
        task_launch("users", "users", agent="harness", harness_command=["sh", "-c", HARNESS], agent_user="nobody",
                    verifier_user="nobody", tools_dir=str(tools), runtime_tree=str(runtime),
                    env={"TASK_VAR": "task"}, verifier_env={"VERIFIER_VAR": "verifier"}),
        task_launch("silent", "verifier-silent", agent="nop"),
    ])
    return {r.rollout_id: r for r in asyncio.run(run_group(backend, group, backend.output_root / "step-0"))}


def summary(result: LaunchResult) -> str:
    return result.model_dump_json(indent=1, exclude={"verifier": {"files"}})[:4000]


def test_the_oracle_scores_1_and_doing_nothing_0(results: dict[str, LaunchResult]) -> None:
    for rollout, reward in (("hello-oracle", 1.0), ("hello-nop", 0.0)):
        result = results[rollout]
        assert result.status == "completed" and result.exit_code == 0, summary(result)
        assert result.verifier is not None and result.verifier.error is VerifierError.NONE, summary(result)
        assert result.verifier.reward == reward and result.verifier.rewards == {"reward": reward}
        assert "checked /app/hello.txt" in result.verifier.files["test-stdout.txt"]


def test_reward_json_gives_per_key_rewards_offline(results: dict[str, LaunchResult]) -> None:
    verified = results["multi-oracle"].verifier
    assert verified is not None and verified.error is VerifierError.NONE, summary(results["multi-oracle"])
    assert verified.rewards == {"correctness": 1.0, "performance": 0.5} and verified.ignored_keys == ["note"]
    # test.sh runs in a network namespace of its own: no interface of the pod's network
    assert "interfaces:" in verified.stdout_tail and "eth0" not in verified.stdout_tail, verified.stdout_tail


def test_an_agent_finds_no_tests_and_its_leftover_cannot_forge_the_reward(results: dict[str, LaunchResult]) -> None:
    attack = results["attack"]
    out = Path(attack.output_dir)
    assert attack.status == "completed", summary(attack)
    assert "CapEff: 0000000000000000" in (out / "whoami.txt").read_text()  # the pod's capabilities are not its
    attempts = (out / "attempts.txt").read_text()
    # Its leftover process forged through the verifier's 3 s (the pod was deleted before it was done)
    assert "forger done" not in attempts and attempts.count("reward.txt: Read-only file system") >= 3, attempts
    assert "busy" in attempts, attempts  # the mount points cannot be renamed away
    found = (out / "found.txt").read_text()
    assert set(found.split()) == {"/tmp/decoy"}, found  # its own decoy (the search works), never the tests
    verified = attack.verifier
    assert verified is not None and verified.error is VerifierError.NONE, summary(attack)
    assert verified.reward == 0.0 and verified.rewards == {"reward": 0.0}, summary(attack)
    assert "reward.json" not in verified.files


def test_a_timed_out_agent_is_still_verified(results: dict[str, LaunchResult]) -> None:
    overrun = results["overrun"]
    assert overrun.status == "truncated" and overrun.exit_code is None, summary(overrun)
    assert "solved, now hanging" in overrun.stdout_tail and "agent's timeout (4 s)" in overrun.stderr_tail
    assert overrun.verifier is not None and overrun.verifier.reward == 1.0, summary(overrun)


def test_the_tasks_users_tools_and_env_and_no_contract_for_the_verifier(results: dict[str, LaunchResult]) -> None:
    users = results["users"]
    assert users.status == "failed" and users.exit_code == 3, summary(users)  # failed, and still verified
    assert users.stdout_tail == "harness out\n" and users.stderr_tail == "harness err\n"
    assert (Path(users.output_dir) / "id.txt").read_text() == "users\n"  # the contract and VERI_OUTPUT_DIR
    assert users.verifier is not None and users.verifier.reward == 1.0, summary(users)
    seen = users.verifier.stdout_tail
    assert "agent was: nobody CapEff: 0000000000000000 PATH=" in seen and ":/veri/rt/bin\n" in seen, seen
    assert "verifier: nobody CapEff: 0000000000000000" in seen, seen
    assert "tool: vendored UV_OFFLINE=1 HOME=/veri/verify/home TASK_VAR=task VERIFIER_VAR=verifier" in seen, seen
    assert "contract leaked: no" in seen, seen  # the contract is in the pod's env: unset for the verifier


def test_a_verifier_without_a_reward_is_not_a_zero(results: dict[str, LaunchResult]) -> None:
    silent = results["silent"]
    assert silent.status == "completed" and silent.verifier is not None, summary(silent)
    assert silent.verifier.error is VerifierError.NO_REWARD and silent.verifier.reward is None, summary(silent)


def test_nothing_is_left_behind(results: dict[str, LaunchResult], backend: KubernetesBackend) -> None:
    """Every rollout's Job is deleted (foreground: its pod, then the Job, then the Secret it owns). The
    backend's part is asking; the objects go once the kubelet's housekeeping has torn the pod down, seconds
    on a quiet node and over a minute on a loaded one (CI's), so that wait is long and the ask is checked
    on its own."""
    ns, selector = backend.pod.namespace, backend.selector

    def left() -> list[tuple[str, Any]]:  # (kind, object): the client's list items carry no kind
        listings = (("Job", backend.batch.list_namespaced_job), ("Pod", backend.core.list_namespaced_pod),
                    ("Secret", backend.core.list_namespaced_secret))
        return [(kind, item) for kind, listing in listings for item in listing(ns, label_selector=selector).items]

    found = left()
    # A pod or Secret goes with its owner Job (the garbage collector): it may carry no deletion mark yet,
    # but its owner does, or is gone already.
    kept_jobs = {item.metadata.name for kind, item in found
                 if kind == "Job" and item.metadata.deletion_timestamp is None}
    never = [f"{kind} {item.metadata.name}" for kind, item in found if item.metadata.deletion_timestamp is None
             and (not item.metadata.owner_references
                  or {owner.name for owner in item.metadata.owner_references} & kept_jobs)]
    assert not never, f"never deleted: {never}"
    deadline = time.monotonic() + 300
    while remaining := [f"{kind} {item.metadata.name}" for kind, item in left()]:
        assert time.monotonic() < deadline, f"deleted but still there after 300 s: {remaining}"
        time.sleep(1)
