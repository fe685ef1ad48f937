"""Record and replay a Harbor task's rollout: the recording keeps the verifier's result, and a replay judges
the episode (the verifier_* rules) and scores the reward (the built-in `verifier` reward, the `verifier` input
of the job's own functions) from it, without running the task's tests again.

The traffic is the checked-in Anthropic SDK recording's, given a Harbor task's row and a verifier result, as
a harness in the task's image would have made it (the proxy cannot tell where its client runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.record_demos import anthropic_tool_loop
from tests.replay.conftest import RECORDINGS, replaying_proxy
from veri.cli import main
from veri.core.config import RewardConfig
from veri.core.dataset import harbor_row
from veri.core.episodes import RolloutStatus
from veri.core.harbor_task import load_task
from veri.core.launch import VerifierResult
from veri.core.rollout_record import RolloutRecord, VerifierRecord
from veri.core.rules import Rule, VerifierError
from veri.services.proxy.control_client import ControlClient
from veri.tools.replay.diff import differences
from veri.tools.replay.recording import Recording, episode_of, rewards_for, score
from veri.tools.replay.runner import replay_in_process

TASK = Path(__file__).resolve().parents[2] / "config/data/harbor_cpu/train/copy-apple-to-violet"
PASSED = VerifierRecord(exit_code=0, reward=1.0, rewards={"reward": 1.0, "correctness": 0.5}, duration_s=1.2,
                        files=["reward.json", "test-stdout.txt"])
TIMED_OUT = VerifierRecord(error=VerifierError.TIMEOUT, message="test.sh ran past 30s", duration_s=30.0)
CORRECTNESS_TWICE = "def reward(completions, verifier):\n    return [verifier[0]['correctness'] * 2]\n"


def harbor_recording(verifier: VerifierRecord, rewards: list[RewardConfig] | None = None) -> Recording:
    """The Anthropic SDK recording as a Harbor task's rollout verified as `verifier` says (what `veri replay
    record --record rollout-K.json` makes of it)."""
    recording = Recording.load(RECORDINGS / "anthropic_sdk.jsonl")
    recording.task, recording.verifier = harbor_row(load_task(TASK)), verifier
    recording.rewards = rewards_for(rewards or [], verifier)
    recording.episode = episode_of(recording.spans, recording.status, recording.exit_code, verifier)
    recording.reward = score(recording, recording.spans, recording.episode)
    return recording


def saved(recording: Recording, path: Path) -> Recording:
    recording.save(path)
    return Recording.load(path)


def test_the_verifier_reward_is_replayed_from_the_recorded_result(tiny_model, tmp_path):
    recording = saved(harbor_recording(PASSED), tmp_path / "harbor.jsonl")
    assert recording.verifier == PASSED and recording.rewards == [RewardConfig(builtin="verifier")]
    assert recording.reward is not None and recording.reward.per_function == {"verifier": 1.0}

    assert differences(recording, replay_in_process(recording, tiny_model)) == []

    # The reward comes from the recorded result: another result, another reward (the tests are not run).
    recording.verifier = PASSED.model_copy(update={"reward": 0.0, "rewards": {"reward": 0.0}})
    found = differences(recording, replay_in_process(recording, tiny_model))
    assert found == ["reward.reward: recorded 1.0, replayed 0.0",
                     "reward.per_function.verifier: recorded 1.0, replayed 0.0"], found


def test_a_verifier_that_could_not_run_replays_its_verdict(tiny_model, tmp_path):
    recording = saved(harbor_recording(TIMED_OUT), tmp_path / "timeout.jsonl")
    assert [verdict.rule for verdict in recording.episode.verdicts] == [Rule.VERIFIER_TIMEOUT]
    assert recording.reward is not None and recording.reward.reward is None  # never a 0

    replay = replay_in_process(recording, tiny_model)
    assert differences(recording, replay) == []
    assert [verdict.rule for verdict in replay.episode.verdicts] == [Rule.VERIFIER_TIMEOUT]

    recording.verifier = None  # as a recording that did not keep it: the verdict is gone from the replay
    found = differences(recording, replay_in_process(recording, tiny_model))
    assert any(line.startswith("episode.verdicts") for line in found), found


def test_the_jobs_own_function_gets_the_recorded_verifier(tiny_model):
    recording = harbor_recording(PASSED, [RewardConfig(source=CORRECTNESS_TWICE)])
    assert recording.reward is not None and recording.reward.per_function == {"reward": 1.0}
    assert differences(recording, replay_in_process(recording, tiny_model)) == []


def test_an_old_recording_keeps_no_verifier():
    header = json.loads((RECORDINGS / "url_extract_openai.jsonl").read_text().splitlines()[0])
    assert "verifier" not in header  # made before Harbor tasks: test_replay.py replays it unchanged
    assert Recording.load(RECORDINGS / "url_extract_openai.jsonl").verifier is None


@pytest.fixture
def proxy_url(anthropic_recording, tiny_model, tmp_path):
    with replaying_proxy(anthropic_recording, tiny_model, tmp_path / "spans") as url:
        yield url


def test_record_from_a_rollout_record_then_replay(proxy_url, tmp_path, capsys):
    """`veri replay record --record rollout-K.json`: the rollout, its task, status and verifier result come from
    the record `veri run-harness --out` (or a job archive) wrote; `veri replay run` replays all of it."""
    control = ControlClient(proxy_url)
    session = control.open_session(record_requests=True)
    anthropic_tool_loop(session)
    spans = control.spans(session.rollout_id)
    result = VerifierResult(exit_code=0, reward=1.0, rewards={"reward": 1.0, "correctness": 0.5},
                            files={"reward.json": '{"reward": 1, "correctness": 0.5}'})
    record = RolloutRecord(rollout_id=session.rollout_id, task_index=0, rollout_index=0,
                           task=harbor_row(load_task(TASK)), status=RolloutStatus.COMPLETED, exit_code=0, spans=spans,
                           episode=episode_of(spans, RolloutStatus.COMPLETED, 0), verifier=VerifierRecord.of(result))
    record_file = tmp_path / "rollout-0.json"
    record_file.write_text(record.model_dump_json())

    out = tmp_path / "harbor.jsonl"
    capsys.readouterr()
    assert main(["replay", "record", "--proxy", proxy_url, "--record", str(record_file), "--out", str(out)]) == 0
    assert "reward 1.0; verifier result kept (verifier reward 1 (correctness 0.5)" in capsys.readouterr().out
    recording = Recording.load(out)
    assert recording.verifier == record.verifier and recording.task == record.task and recording.exit_code == 0
    assert recording.reward is not None and recording.reward.per_function == {"verifier": 1.0}
    assert main(["replay", "run", str(out), "--proxy", proxy_url]) == 0
    assert "identical to the recording" in capsys.readouterr().out

    # --verifier (the launcher's result, files and all) in place of the record's; the job's own function
    launched = tmp_path / "verifier.json"
    launched.write_text(result.model_copy(update={"rewards": {"reward": 0.0, "correctness": 0.25},
                                                  "reward": 0.0}).model_dump_json())
    reward_file = tmp_path / "twice.py"
    reward_file.write_text(CORRECTNESS_TWICE)
    own = tmp_path / "own.jsonl"
    assert main(["replay", "record", "--proxy", proxy_url, "--record", str(record_file), "--verifier", str(launched),
                 "--reward", str(reward_file), "--reward", "verifier", "--out", str(own)]) == 0
    recording = Recording.load(own)
    assert recording.verifier is not None and recording.verifier.rewards == {"reward": 0.0, "correctness": 0.25}
    assert recording.reward is not None and recording.reward.per_function == {"reward": 0.5, "verifier": 0.0}
    assert main(["replay", "run", str(own), "--proxy", proxy_url]) == 0
    capsys.readouterr()


def test_record_refusals_name_the_fix(tmp_path, capsys):
    """Each is refused before the proxy is asked (none listens at the URL)."""
    record = RolloutRecord(rollout_id="r-1", task_index=0, rollout_index=0, status=RolloutStatus.COMPLETED,
                           episode=episode_of([], RolloutStatus.COMPLETED, 0))  # no verifier: not a Harbor task's
    record_file, not_json = tmp_path / "rollout-0.json", tmp_path / "verifier.json"
    record_file.write_text(record.model_dump_json())
    not_json.write_text("not json")
    for args, says in [
        (["--record", str(record_file), "--rollout", "r-2"], "is the record of rollout 'r-1', not 'r-2'"),
        (["--record", str(record_file), "--reward", "verifier"], "pass the rollout's record (--record rollout-K.json)"),
        (["--record", str(record_file), "--verifier", str(not_json)], "is not JSON"),
        (["--verifier", str(record_file), "--rollout", "r-1"], "a rollout with no verifier (not a Harbor task's)"),
        (["--record", str(tmp_path / "none.json")], "no rollout record at"),
        ([], "name the rollout: --rollout ID, or --record"),
    ]:
        code = main(["replay", "record", "--proxy", "http://127.0.0.1:9", *args, "--out", str(tmp_path / "x.jsonl")])
        printed = capsys.readouterr().err
        assert code == 1 and says in printed and "Traceback" not in printed, (args, printed)
