"""`veri run-harness` against the compose stack: the demo bundles in gVisor sandboxes, through the
capture proxy, to the tiny model — and what a sandbox can and cannot reach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.stack.conftest import CLAUDE_TASK, CODEX_TASK, OPENAI_TASK, dataset_row
from veri.core.rollouts import RolloutRecord
from veri.proxy.control_client import ControlClient

pytestmark = pytest.mark.slow


def records(out: Path, task: int) -> list[RolloutRecord]:
    return [RolloutRecord.model_validate_json(p.read_text()) for p in sorted((out / f"task-{task}").glob("*.json"))]


def run_demo(stack, bundle: str, task: int, out: Path, n: int) -> list[RolloutRecord]:
    done = stack.veri("run-harness", "--bundle", f"harness-bundles/{bundle}", "--dataset",
                      "config/data/url_extract.jsonl", "--index", str(task), "-n", str(n), "--out", str(out),
                      "--no-up", "--max-turns", "4")
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert "prompt source per span" in done.stdout
    found = records(out, task)
    assert len(found) == n
    return found


def test_openai_bundle_in_gvisor(stack, tmp_path):
    expected = dataset_row(OPENAI_TASK)["expected_url"]
    for record in run_demo(stack, "url_extract_openai", OPENAI_TASK, tmp_path, n=2):
        assert record.status == "completed", record.episode.verdicts
        assert [s.prompt_source for s in record.spans] == ["full_render", "bridged"]
        assert record.spans[-1].reply_message["content"] == f"ANSWER: {expected}"
        assert record.episode.row is not None and not record.episode.verdicts
    assert (tmp_path / "outputs").exists()


def test_claude_bundle_in_gvisor(stack, tmp_path):
    expected = dataset_row(CLAUDE_TASK)["expected_url"]
    [record] = run_demo(stack, "url_extract_claude", CLAUDE_TASK, tmp_path, n=1)
    assert record.status == "completed", record.episode.verdicts
    assert record.spans[0].reply_message["tool_calls"][0]["function"]["name"] == "Bash"
    assert f"ANSWER: {expected}" in record.spans[-1].reply_message["content"]
    answers = list((tmp_path / "outputs").rglob("answer.txt"))
    assert [a.read_text().strip() for a in answers] == [expected]


def test_codex_bundle_in_gvisor(stack, tmp_path):
    """`codex exec`, unmodified, in the sandbox: the Responses route, a shell tool call, bridged."""
    expected = dataset_row(CODEX_TASK)["expected_url"]
    [record] = run_demo(stack, "url_extract_codex", CODEX_TASK, tmp_path, n=1)
    assert record.status == "completed", record.episode.verdicts
    assert [s.protocol for s in record.spans] == ["openai.responses"] * 2
    assert record.spans[0].reply_message["tool_calls"][0]["function"]["name"] == "exec_command"
    assert [s.prompt_source for s in record.spans] == ["full_render", "bridged"]
    assert record.spans[-1].reply_message["content"] == f"ANSWER: {expected}"
    assert record.episode.row is not None and not record.episode.verdicts
    answers = list((tmp_path / "outputs").rglob("answer.txt"))
    assert [a.read_text().strip() for a in answers] == [expected]


PROBE = r'''
import json, os, socket, urllib.request, urllib.error
task = json.loads(os.environ["VERI_TASK"])
result = {"env": sorted(os.environ)}
def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(bytes.fromhex(fields[2])[::-1])
for name, host, port in [("policy", "policy", 8001), ("launcher", "launcher", 8002),
                         ("host_proxy_port", gateway(), task["host_proxy_port"])]:
    try:
        socket.create_connection((host, port), timeout=3).close(); result[name] = "reachable"
    except OSError as error:
        result[name] = f"unreachable: {error}"
result["docker_socket"] = os.path.exists("/var/run/docker.sock")
base = os.environ["ANTHROPIC_BASE_URL"].rsplit("/r/", 1)[0]
request = urllib.request.Request(f"{base}/r/{task['other_rollout']}/v1/models",
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
try:
    urllib.request.urlopen(request, timeout=5); result["other_rollout"] = 200
except urllib.error.HTTPError as error:
    result["other_rollout"] = error.code
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/models",
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
result["own_rollout"] = urllib.request.urlopen(request, timeout=5).status
result["webfixture"] = urllib.request.urlopen("http://webfixture:8080/health", timeout=5).status
json.dump(result, open(os.path.join(os.environ["VERI_OUTPUT_DIR"], "probe.json"), "w"))
'''


def test_sandbox_isolation(stack, tmp_path):
    bundle = tmp_path / "probe"
    bundle.mkdir()
    (bundle / "veri-harness.toml").write_text('name = "isolation_probe"\nentrypoint = ["python", "probe.py"]\n')
    (bundle / "probe.py").write_text(PROBE)
    other = ControlClient(stack.proxy_url, token=stack.control_token).open_session()
    out = tmp_path / "out"
    done = stack.veri("run-harness", "--bundle", str(bundle), "--task",
                      json.dumps({"prompt": "probe", "other_rollout": other.rollout_id,
                                  "host_proxy_port": int(stack.proxy_url.rsplit(":", 1)[1])}),
                      "--out", str(out), "--no-up")
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    [record] = records(out, 0)
    assert record.status == "completed", record.episode.verdicts
    [probe] = list(out.rglob("probe.json"))
    result = json.loads(probe.read_text())
    assert result["policy"].startswith("unreachable") and result["launcher"].startswith("unreachable")
    assert result["host_proxy_port"].startswith("unreachable")
    assert result["docker_socket"] is False
    assert result["other_rollout"] == 401 and result["own_rollout"] == 200 and result["webfixture"] == 200
    import docker

    image_env = {item.split("=", 1)[0] for item in docker.from_env().images.get("veri/base").attrs["Config"]["Env"]}
    contract = {"OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
                "VERI_POLICY_BASE_URL", "VERI_POLICY_MODEL", "VERI_TASK_INPUT", "VERI_TASK", "VERI_TASK_INDEX",
                "VERI_ROLLOUT_INDEX", "VERI_ROLLOUT_ID", "VERI_MAX_TURNS", "VERI_OUTPUT_DIR"}
    assert contract <= set(result["env"])
    leaked = set(result["env"]) - contract - image_env - {"HOSTNAME", "HOME", "PWD", "SHLVL", "_"}
    assert not leaked, f"host variables leaked into the sandbox: {leaked}"
    assert "VERI_CONTROL_TOKEN" not in result["env"] and "VERI_TEST_HOST_SECRET" not in result["env"]
