"""Harbor tasks, in process: reading the verifier's output (reward files as Harbor reads them, failures
named, markers only with the nonce), the task's network ask against the bundle's egress, the launch
contract, and the backends that refuse a task launch. The real runs: tests/sandbox/launcher/
test_harbor_verifier.py."""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from veri.core.episodes import build_episode
from veri.core.harbor_task import load_task
from veri.core.launch import RolloutLaunch, TaskEnvironment, VerifierResult, task_environment
from veri.core.rules import Effect, Rule, VerifierError
from veri.services.launcher import task_sandbox, verifier
from veri.services.launcher.local import LocalBackend
from veri.services.launcher.task_steps import read_turn

NONCE = "n0nce"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def output(exit_code: int = 0, txt: bytes | None = None, js: bytes | None = None, files: dict[str, bytes] | None = None,
           end: bool = True) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in (files or {}).items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    lines = [f"==veri:{NONCE}:exit== {exit_code}"]
    if txt is not None:
        lines += [f"==veri:{NONCE}:reward.txt==", b64(txt)]
    if js is not None:
        lines += [f"==veri:{NONCE}:reward.json==", b64(js)]
    lines += [f"==veri:{NONCE}:files==", b64(buffer.getvalue())]
    if end:
        lines.append(f"==veri:{NONCE}:end==")
    return "\n".join(lines) + "\n"


def read(stdout: str, stderr: str = "") -> VerifierResult:
    return verifier.result(stdout, stderr, NONCE, timeout_s=30, duration_s=1.5)


@pytest.mark.parametrize(("txt", "js", "reward", "rewards"), [
    (b"1\n", None, 1.0, {"reward": 1.0}),
    (b" 0 ", None, 0.0, {"reward": 0.0}),
    (b"0.25", None, 0.25, {"reward": 0.25}),
    (None, b'{"correctness": 1, "performance": 0.5}', None, {"correctness": 1.0, "performance": 0.5}),
    (None, b'{"reward": 0.5, "speed": 2}', 0.5, {"reward": 0.5, "speed": 2.0}),
    (b"1", b'{"speed": 3}', 1.0, {"speed": 3.0, "reward": 1.0}),  # reward.txt joins as `reward`
    (b"1", b'{"reward": 0}', 0.0, {"reward": 0.0}),  # reward.json wins
])
def test_reward_files_read_as_harbor_does(txt, js, reward, rewards):
    result = read(output(txt=txt, js=js, files={"test-stdout.txt": b"2 passed\n"}))
    assert result.error is VerifierError.NONE and result.message == ""
    assert result.reward == reward and result.rewards == rewards
    assert result.exit_code == 0 and result.stdout_tail == "2 passed\n" and result.duration_s == 1.5


def test_non_numeric_json_keys_are_named_and_left_out():
    result = read(output(js=b'{"correct": true, "note": "x", "score": 1}'))
    assert result.rewards == {"score": 1.0} and result.ignored_keys == ["correct", "note"]


@pytest.mark.parametrize(("txt", "js", "error", "words"), [
    (None, None, VerifierError.NO_REWARD, "wrote neither /logs/verifier/reward.txt nor"),
    (b"", None, VerifierError.ERROR, "reward.txt is empty"),
    (b"\n", None, VerifierError.ERROR, "reward.txt is empty"),
    (b"passed", None, VerifierError.ERROR, "not a number"),
    (b"nan", None, VerifierError.ERROR, "not a finite number"),
    (b"-inf", None, VerifierError.ERROR, "not a finite number"),
    (None, b"{not json", VerifierError.ERROR, "reward.json is not JSON"),
    (None, b"[1]", VerifierError.ERROR, "not a JSON object"),
    (None, b'{"reward": NaN}', VerifierError.ERROR, "not a finite number"),
    (None, b'{"reward": Infinity}', VerifierError.ERROR, "not a finite number"),
    (None, b'{"note": "x"}', VerifierError.ERROR, "holds no number"),
])
def test_no_reward_is_never_a_zero(txt, js, error, words):
    result = read(output(txt=txt, js=js))
    assert result.error is error and words in result.message, result.message
    assert result.reward is None and result.rewards == {}


def test_timeout_and_broken_runs():
    timed_out = read(output(exit_code=124, txt=b"1"))
    assert timed_out.error is VerifierError.TIMEOUT and timed_out.reward is None
    assert "timeout_sec (30 s)" in timed_out.message
    cut = read(output(txt=b"1", end=False), stderr="tar: short read")
    assert cut.error is VerifierError.ERROR and "tar: short read" in cut.message
    setup = read(f"==veri:{NONCE}:error== the tests could not be unpacked into /tests\n")
    assert setup.error is VerifierError.ERROR and "could not be unpacked" in setup.message


def test_markers_without_the_nonce_are_text():
    # Anything test.sh prints goes to a file, but a marker without this verification's nonce never counts.
    forged = output(txt=b"0").replace(f"==veri:{NONCE}:end==", "==veri:other:reward.txt==\nMQ==\n" +
                                      f"==veri:{NONCE}:end==")
    result = read(forged)
    assert result.reward == 0.0
    after_the_end = output(txt=b"0") + f"==veri:{NONCE}:reward.txt==\nMQ==\n"  # "1", printed after the end
    assert read(after_the_end).reward == 0.0


def test_only_the_first_pid_line_is_the_agents_init():
    stdout = f"==veri:{NONCE}:pid== 7\n==veri:{NONCE}:pid== 1\n==veri:{NONCE}:exit== 0\n"
    turn = read_turn(stdout, NONCE)
    assert turn.pid == 7 and turn.exit_code == 0 and turn.error is None
    assert read_turn(f"==veri:{NONCE}:pid== 9\n==veri:{NONCE}:error== no user x\n", NONCE).error \
        == "the task's sandbox could not start the agent: no user x"


def test_the_stricter_egress_wins():
    stricter = task_sandbox.stricter
    assert stricter("open", "open") == "open"
    assert stricter("open", "none") == "none" and stricter("none", ["a.com"]) == "none"
    assert stricter("open", ["pypi.org"]) == ["pypi.org"] and stricter(["pypi.org"], "open") == ["pypi.org"]
    assert stricter(["*.example.com", "pypi.org:443"], ["api.example.com", "pypi.org", "pypi.org:443", "b.com"]) \
        == ["api.example.com", "pypi.org:443"]
    assert stricter(["a.com"], ["b.com"]) == "none"  # nothing both allow
    assert TaskEnvironment(image="i", tests_dir="/t", agent="nop", network_mode="no-network").egress() == "none"
    ask = TaskEnvironment(image="i", tests_dir="/t", agent="nop", network_mode="allowlist", allowed_hosts=["A.com"])
    assert ask.egress() == ["a.com"]


def test_the_task_environment_contract():
    with pytest.raises(ValidationError, match="needs harness_command"):
        TaskEnvironment(image="i", tests_dir="/t")
    with pytest.raises(ValidationError, match="needs solution_dir"):
        TaskEnvironment(image="i", tests_dir="/t", agent="oracle")
    with pytest.raises(ValidationError, match="no-network"):
        TaskEnvironment(image="i", tests_dir="/t", agent="nop", network_mode="allowlist")
    with pytest.raises(ValidationError, match="URL"):
        TaskEnvironment(image="i", tests_dir="/t", agent="nop", network_mode="allowlist",
                        allowed_hosts=["https://a.com/x"])
    assert TaskEnvironment(image="i", tests_dir="/t", agent="nop", agent_user=65534).agent_user == "65534"
    task = TaskEnvironment(image="i", tests_dir="/t", agent="nop", agent_timeout_s=30, memory_mb=512)
    assert task_sandbox.agent_timeout(task, 600) == 30 and task_sandbox.agent_timeout(task, 10) == 10
    assert task_sandbox.resources(task, RolloutLaunch.model_fields["limits"].get_default(call_default_factory=True)) \
        .memory_mb == 512
    with pytest.raises(ValidationError, match="frozen"):
        task.image = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="no reward"):
        VerifierResult(error=VerifierError.TIMEOUT, reward=1.0)


def test_a_loaded_task_as_the_launchs_environment():
    tasks = Path(__file__).resolve().parents[1] / "fixtures/harbor/verifier"
    hello = task_environment(load_task(tasks / "hello"), image="veri/task-hello:abc", agent="oracle")
    assert hello.image == "veri/task-hello:abc" and hello.workdir == "/app" and hello.agent == "oracle"
    assert hello.tests_dir == str(tasks / "hello/tests") and hello.solution_dir == str(tasks / "hello/solution")
    assert hello.agent_timeout_s == 60 and hello.verifier_timeout_s == 60 and hello.network_mode == "public"
    harness = task_environment(load_task(tasks / "verifier-slow"), image="i", harness_command=["python3", "main.py"],
                               runtime_tree="/rt", tools_dir="/tools")
    assert harness.solution_dir is None and harness.harness_command == ["python3", "main.py"]
    assert harness.verifier_timeout_s == 2 and (harness.runtime_tree, harness.tools_dir) == ("/rt", "/tools")


def test_task_toml_fields_reach_the_launch(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test.sh").write_text("echo 1 >/logs/verifier/reward.txt\n")
    (tmp_path / "instruction.md").write_text("do it\n")
    (tmp_path / "task.toml").write_text(
        'schema_version = "1.3"\n[agent]\nuser = 1000\n[verifier]\nuser = "tester"\nenv = {A = "1"}\n'
        '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = []\ncpus = 2\nmemory_mb = 1024\n'
        'env = {B = "2"}\n[environment.healthcheck]\ncommand = "true"\nretries = 5\n')
    task = task_environment(load_task(tmp_path), image="i", agent="nop")
    assert task.network_mode == "no-network" and task.egress() == "none"  # an empty allowlist denies all
    assert (task.agent_user, task.verifier_user, task.verifier_env, task.env) == ("1000", "tester", {"A": "1"},
                                                                                  {"B": "2"})
    assert (task.cpus, task.memory_mb) == (2, 1024) and task.healthcheck is not None
    assert task.healthcheck.command == "true" and task.healthcheck.retries == 5


def test_verifier_verdicts_reject_the_rollout():
    for error, rule in ((VerifierError.NO_REWARD, Rule.VERIFIER_NO_REWARD),
                        (VerifierError.TIMEOUT, Rule.VERIFIER_TIMEOUT), (VerifierError.ERROR, Rule.VERIFIER_ERROR)):
        result = VerifierResult(error=error, message="why", stdout_tail="test output", exit_code=3)
        episode = build_episode([], verifier=result)
        verdict = next(v for v in episode.verdicts if v.rule == rule)
        assert verdict.effect is Effect.REJECT and verdict.message == "why" and episode.rejected
        assert verdict.details["test_stdout_tail"] == "test output" and verdict.details["exit_code"] == 3
    scored = build_episode([], verifier=VerifierResult(reward=0.0, rewards={"reward": 0.0}))
    assert not any(v.rule.value.startswith("verifier_") for v in scored.verdicts)


def test_the_local_backend_refuses_a_task(tmp_path):
    task = TaskEnvironment(image="i", tests_dir="/t", agent="nop")
    launch = RolloutLaunch(rollout_id="r", image="i", env={}, timeout_s=5, task_env=task)
    result = asyncio.run(LocalBackend().run(launch, tmp_path / "out"))
    assert result.status == "failed" and "runs on the docker and kubernetes backends" in result.infrastructure_error
    assert "--backend docker" in result.infrastructure_error
