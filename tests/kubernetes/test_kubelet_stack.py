"""The stack with its rollouts on the real kubelet, the way a user runs it: `make up` with
VERI_LAUNCHER_BACKEND=kubernetes (compose.kubernetes.yaml: the stack's launcher container makes one Job
per rollout, gVisor RuntimeClass -> runsc, through the tier's kubeconfig), then `veri run-harness
--sandbox launcher` of the URL bundle and `make train` two steps on the tiny model, asynchronously
(max_staleness 1: the docker stack's tests train synchronously; the launcher backend is the same for
both, what async adds is groups started across step boundaries and cancelled at the end). And a Harbor
task, both ways: each rollout in the task's own image on the node, then its hidden tests by the verifier
(the launcher container has no Docker: the image's config comes with the launch, the tests from the
staged copy it mounts).

How the pods reach the stack: with no CNI the kubelet (dockershim) puts each pod in Docker's default
bridge, so the host is their gateway (VERI_K8S_STACK_ADDRESS); the proxy's rollout port and the web
fixture are published there, and the launcher pins `proxy` and `webfixture` to it in the pods'
/etc/hosts. The apiserver also listens there (cluster.kubelet_cluster), which is how the launcher
container reaches it. Scripted replies (as tests/stack) make the random tiny model fetch and answer.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from testkit.demo import answer_rule, fetch_rule, tool_call
from testkit.kubernetes_cluster import KUBELET_NODE, KubeCluster, fresh_namespace, pod_network_gateway, wait_for
from testkit.servers import free_port
from tests.stack.conftest import DATASET, HARBOR_RULE, OPENAI_TASK, Stack, dataset_row
from veri.core.rollout_record import RolloutRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # make up / make train may rebuild veri/runtime

REPO = Path(__file__).resolve().parents[2]
# 2 steps x 4 rollouts (one scripted URL task, one free task), max_staleness 1
JOB = "tests/kubernetes/train_job_async/job.yaml"
# 2 steps x 2 rollouts of one CPU-demo task, answered with its solution (HARBOR_RULE), scored by its tests
HARBOR_JOB = "tests/stack/harbor_job/job.yaml"
HARBOR_TASK = "config/data/harbor_cpu/train/write-word-apple"
ROLLOUT_LABEL = "veri.sandbox=1"


def launcher_kubeconfig(cluster: KubeCluster, address: str, out: Path) -> Path:
    """The admin kubeconfig with the server at `address` (a container cannot reach the host's 127.0.0.1)
    and the CA inline (its file is not in the container)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    entry = config["clusters"][0]["cluster"]
    ca = Path(entry.pop("certificate-authority")).read_bytes()
    entry["certificate-authority-data"] = base64.b64encode(ca).decode()
    entry["server"] = cluster.server.replace("127.0.0.1", address)
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


def pods_started(cluster: KubeCluster, namespace: str) -> set[str]:
    """The pods the kubelet started in `namespace` (its `Started` events outlive the pods)."""
    from kubernetes import client

    events = client.CoreV1Api(cluster.api_client()).list_namespaced_event(namespace).items
    return {e.involved_object.name for e in events
            if e.reason == "Started" and e.involved_object.kind == "Pod" and e.source.host == KUBELET_NODE}


def gone(cluster: KubeCluster, namespace: str) -> bool:
    """The launcher deletes each Job with foreground propagation when its rollout ends; the control
    plane's garbage collector then removes the pod, the Secret and the Job itself, once the kubelet has
    torn the pod down (seconds on a quiet box, over a minute on CI's loaded one): wait for that, as the
    backend's own tests do, instead of reading the instant the result came."""
    try:
        wait_for("the rollouts' Jobs, pods and Secrets gone", lambda: not leftovers(cluster, namespace), timeout=300)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {leftovers(cluster, namespace)}") from None
    return True


def leftovers(cluster: KubeCluster, namespace: str) -> dict[str, list[str]]:
    from kubernetes import client

    api = cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    found = {
        "jobs": batch.list_namespaced_job(namespace, label_selector=ROLLOUT_LABEL).items,
        "pods": core.list_namespaced_pod(namespace, label_selector=ROLLOUT_LABEL).items,
        "secrets": core.list_namespaced_secret(namespace, label_selector=ROLLOUT_LABEL).items,
    }
    return {kind: [item.metadata.name for item in items] for kind, items in found.items() if items}


@pytest.fixture(scope="module")
def kubelet_stack(k8s_kubelet_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Stack, str]]:
    """`make up` with the kubernetes launcher on the tier's cluster; (the stack, its namespace)."""
    state = tmp_path_factory.mktemp("k8s-stack-state")
    rows = [json.loads(line) for line in DATASET.read_text().splitlines()]
    rules = [answer_rule(row) for row in rows]  # answer rules first: the page is the last turn then
    rules += [fetch_rule(row, tool_call("fetch_url", {"url": row["url"]})) for row in rows]
    rules.append(HARBOR_RULE)
    (state / "jobs").mkdir()  # the policy sees only the state folder's jobs/ (read-only)
    (state / "jobs" / "script.json").write_text(json.dumps(rules))
    address = pod_network_gateway()
    kubeconfig = launcher_kubeconfig(k8s_kubelet_cluster, address, tmp_path_factory.mktemp("k8s") / "kubeconfig")
    port = free_port()
    project = f"veri-k8s-{os.getpid()}"
    with fresh_namespace(k8s_kubelet_cluster) as namespace:
        env = {**os.environ, "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_PROXY_PORT": str(port),
               "VERI_CONSOLE_PORT": str(free_port()), "VERI_ROLLOUTS_NETWORK": f"{project}-rollouts",
               "VERI_POLICY_SCRIPTED_REPLIES": "/state/jobs/script.json", "VERI_PROXY_URL": f"http://127.0.0.1:{port}",
               "VERI_LAUNCHER_BACKEND": "kubernetes", "VERI_LAUNCHER_KUBECONFIG": str(kubeconfig),
               "VERI_LAUNCHER_NAMESPACE": namespace, "VERI_K8S_STACK_ADDRESS": address,
               "VERI_K8S_PROXY_PORT": str(free_port()), "VERI_LAUNCHER_PORT": str(free_port())}
        up = subprocess.run(["make", "--no-print-directory", "up"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=1800)
        try:
            assert up.returncode == 0, f"make up failed:\n{up.stdout[-3000:]}\n{up.stderr[-5000:]}"
            yield Stack(env=env, proxy_url=f"http://127.0.0.1:{port}", state=state), namespace
        finally:
            subprocess.run(["make", "--no-print-directory", "down"], cwd=REPO, env=env, capture_output=True,
                           timeout=300)


def test_run_harness_url_bundle_on_the_kubelet(kubelet_stack, k8s_kubelet_cluster, tmp_path):
    stack, namespace = kubelet_stack
    expected = dataset_row(OPENAI_TASK)["expected_url"]
    done = stack.veri("run-harness", "--bundle", "harness-bundles/url_extract_openai", "--dataset",
                      "config/data/url_extract.jsonl", "--index", str(OPENAI_TASK), "-n", "2", "--out", str(tmp_path),
                      "--sandbox", "launcher", "--no-up", "--max-turns", "4")
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    records = [RolloutRecord.model_validate_json(p.read_text())
               for p in sorted((tmp_path / f"task-{OPENAI_TASK}").glob("*.json"))]
    assert len(records) == 2
    for record in records:
        assert record.status == "completed", record.episode.verdicts
        # fetched the page from the web fixture (through the pod's hostAlias), then answered
        assert [s.prompt_source for s in record.spans] == ["full_render", "bridged"]
        assert record.spans[-1].reply_message["content"] == f"ANSWER: {expected}"
        assert all(span.prompt_token_ids and span.completion_token_ids and span.completion_logprobs
                   for span in record.spans)
        assert record.episode.row is not None and not record.episode.verdicts
    answers = sorted((tmp_path / "outputs").rglob("answer.txt"))  # written in the pods, moved here
    assert [a.read_text().strip() for a in answers] == [expected, expected]
    launcher = httpx.get(f"http://127.0.0.1:{stack.env['VERI_LAUNCHER_PORT']}/health", timeout=10).json()
    assert launcher["backend"] == "kubernetes", launcher
    assert len(pods_started(k8s_kubelet_cluster, namespace)) >= 2  # gVisor pods on the kubelet's node
    assert gone(k8s_kubelet_cluster, namespace)


def test_make_train_two_steps_on_the_kubelet(kubelet_stack, k8s_kubelet_cluster):
    """An asynchronous job on the kubelet: each step trains 4 rollouts sampled at most one version
    behind, the groups dispatched for a third step are cancelled when the job ends, and every Job,
    pod and Secret is gone."""
    stack, namespace = kubelet_stack
    name = f"k8s-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    job = stack.state / "jobs" / name
    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for step, line in zip((0, 1), metrics, strict=True):
        assert line["staleness/max"] <= 1 and line["rollouts/stale_dropped"] == 0, line
        records = [RolloutRecord.model_validate_json(p.read_text())
                   for p in sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))]
        assert len(records) == 4
        for record in records:
            assert record.status == "completed" and record.trainable, record.verdicts
            assert record.spans and all(span.completion_token_ids and span.completion_logprobs
                                        for span in record.spans)
            versions = {span.policy_version for span in record.spans}  # may straddle a weight update
            assert min(versions) == step - record.staleness and max(versions) <= step, record.rollout_id
            assert record.reward is not None
        # a step takes the first groups to finish, so which tasks it trains is not fixed: every scripted
        # rollout fetched the page through its pod and answered
        scripted = [r for r in records if r.task["expected_url"] != "https://nothing.test/"]
        assert all(r.reward.per_function["reward"] == 1.0 for r in scripted), [r.reward for r in scripted]
    # the launcher's Jobs ran on the kubelet's node (the namespace's events say so) and are gone, with
    # their pods and Secrets: the trained ones and those of the groups cancelled at the end
    assert len(pods_started(k8s_kubelet_cluster, namespace)) >= 8  # 2 steps x 4 (and run-harness's, if it ran)
    assert gone(k8s_kubelet_cluster, namespace)


def test_run_harness_on_a_harbor_task_through_the_launcher(kubelet_stack, k8s_kubelet_cluster, tmp_path):
    """`veri run-harness --task-dir --sandbox launcher`: built and staged on the host, run by the stack's
    launcher in the task's image on the node, each rollout's reward from the task's tests."""
    stack, namespace = kubelet_stack
    done = stack.veri("run-harness", "--bundle", "harness-bundles/harbor_bash", "--task-dir", HARBOR_TASK, "-n", "2",
                      "--out", str(tmp_path), "--sandbox", "launcher", "--no-up", "--max-turns", "2",
                      "--image-map", "python:3.11-slim=veri/os-base")
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.count("verifier reward: 1") == 2, done.stdout
    records = [RolloutRecord.model_validate_json(p.read_text()) for p in sorted((tmp_path / "task-0").glob("*.json"))]
    assert len(records) == 2
    for record in records:
        assert record.status == "completed" and record.verifier is not None and record.verifier.reward == 1.0
        assert "echo apple > /app/answer.txt" in str(record.spans[0].reply_message.get("content"))
    assert gone(k8s_kubelet_cluster, namespace)


def test_make_train_on_a_harbor_task_on_the_kubelet(kubelet_stack, k8s_kubelet_cluster):
    """`make train` on a Harbor dataset with the kubernetes launcher: staged on the host, trained in the
    trainer container, each rollout's reward of 1 from the task's tests run after the agent in its pod."""
    stack, namespace = kubelet_stack
    name = f"k8s-harbor-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={HARBOR_JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    job = stack.state / "jobs" / name
    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0]  # one step: the async job above syncs weights between steps
    for line in metrics:
        assert line["reward_fn/verifier/mean"] == 1.0 and line["verifier/verified"] == 2, line
    records = sorted((job / "trajectories").rglob("rollout-*.json"))
    assert len(records) == 2
    for path in records:
        record = RolloutRecord.model_validate_json(path.read_text())
        assert record.status == "completed" and record.trainable, record.verdicts
        assert record.verifier is not None and record.verifier.reward == 1.0, record.verifier
        assert (path.with_suffix("") / "verifier" / "reward.txt").read_text().strip() == "1"
    assert gone(k8s_kubelet_cluster, namespace)
