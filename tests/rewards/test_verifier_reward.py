"""The built-in `verifier` reward (a Harbor task's tests, no code in the job): its functions and weights,
a failed verifier never a 0, the job's own functions getting the verifier's numbers, and the job file's
syntax (the default of a `harbor:` dataset with no rewards)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from testkit.spans import bridged_chain
from tests.core.jobs import job, make_job_dir, write_job
from veri.core.config import RewardConfig
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import VerifierResult
from veri.core.problems import ProblemsError
from veri.core.rollout_record import RolloutRecord, VerifierRecord
from veri.core.rules import Rule, VerifierError
from veri.loop.rewards import RewardFunction, RewardInputs, RewardScorer, load_reward_functions
from veri.validation.run import check_config

HARBOR_FIXTURES = Path(__file__).resolve().parents[2] / "tests/fixtures/harbor/veri"
TASK = {"prompt": "make hello.txt", "task_name": "hello", "harbor_task": "/tasks/hello"}
COLUMNS = ["harbor_task", "prompt", "task_name"]


def record(result: VerifierResult) -> RolloutRecord:
    spans = bridged_chain()
    return RolloutRecord(rollout_id="r-1", task_index=0, rollout_index=0, task=TASK, status=RolloutStatus.COMPLETED,
                         spans=spans, episode=build_episode(spans, verifier=result),
                         verifier=VerifierRecord.of(result))


def score(rewards: list[RewardConfig], result: VerifierResult, *extra: RewardFunction):
    functions = [*load_reward_functions(rewards, COLUMNS), *extra]
    with RewardScorer(functions, 5.0) as scorer:
        return scorer.score(RewardInputs.from_record(record(result)))


def test_the_verifier_reward_is_the_tests_reward():
    outcome = score([RewardConfig(builtin="verifier")], VerifierResult(exit_code=0, reward=1.0,
                                                                        rewards={"reward": 1.0}))
    assert outcome.reward == 1.0 and outcome.per_function == {"verifier": 1.0} and outcome.verdicts == []
    zero = score([RewardConfig(builtin="verifier", weight=2.0)], VerifierResult(exit_code=1, reward=0.0,
                                                                                rewards={"reward": 0.0}))
    assert zero.reward == 0.0 and zero.per_function == {"verifier": 0.0}  # tests that ran and failed: a real 0


def test_each_reward_json_key_is_a_function_with_its_weight():
    spec = RewardConfig(builtin="verifier", weight=0.0, keys={"correctness": 1.0, "performance": 0.5})
    result = VerifierResult(exit_code=0, rewards={"correctness": 1.0, "performance": 0.5})
    outcome = score([spec], result)
    assert outcome.per_function == {"verifier": None, "verifier/correctness": 1.0, "verifier/performance": 0.5}
    assert outcome.reward == pytest.approx(1.0 + 0.25)
    assert [(f.name, f.weight) for f in load_reward_functions([spec], COLUMNS)] == [
        ("verifier", 0.0), ("verifier/correctness", 1.0), ("verifier/performance", 0.5)]


def test_a_key_the_job_weighs_but_the_tests_did_not_write_is_a_reward_error():
    spec = RewardConfig(builtin="verifier", keys={"speed": 1.0})
    outcome = score([spec], VerifierResult(exit_code=0, reward=1.0, rewards={"reward": 1.0, "correctness": 1.0}))
    assert outcome.reward is None
    [verdict] = outcome.verdicts
    assert verdict.rule == Rule.REWARD_ERROR and "no key 'speed'" in verdict.message
    assert "['correctness', 'reward']" in verdict.message


def test_reward_json_without_reward_and_no_keys_names_the_fix():
    outcome = score([RewardConfig(builtin="verifier")], VerifierResult(exit_code=0, rewards={"correctness": 1.0}))
    assert outcome.reward is None and "`keys:" in outcome.verdicts[0].message


@pytest.mark.parametrize("error", [VerifierError.NO_REWARD, VerifierError.TIMEOUT, VerifierError.ERROR])
def test_a_verifier_that_could_not_run_is_never_a_zero(error: VerifierError):
    result = VerifierResult(error=error, message="test.sh wrote nothing", exit_code=0)
    rollout = record(result)
    assert not rollout.rewarded and rollout.episode.rejected  # the verifier's rule rejects it
    assert {v.rule for v in rollout.verdicts} == {Rule(f"verifier_{error.value}")}
    outcome = score([RewardConfig(builtin="verifier", keys={"correctness": 1.0})], result)
    assert outcome.reward is None
    assert outcome.per_function == {"verifier": None, "verifier/correctness": None}


def test_the_jobs_own_functions_get_the_verifiers_numbers():
    seen = []

    def reward(completions, verifier):
        seen.append(verifier)
        return [verifier[0]["correctness"] * 0.5]

    def plain(completions, **kwargs):  # not declared: not passed, like trajectory and outputs
        seen.append(sorted(kwargs))
        return [1.0]

    result = VerifierResult(exit_code=0, reward=1.0, rewards={"reward": 1.0, "correctness": 1.0})
    outcome = score([RewardConfig(builtin="verifier")], result, RewardFunction.wrap("mine", reward),
                    RewardFunction.wrap("plain", plain))
    assert seen[0] == [{"reward": 1.0, "correctness": 1.0}] and "verifier" not in seen[1]
    assert outcome.per_function == {"verifier": 1.0, "mine": 0.5, "plain": 1.0} and outcome.reward == 2.5
    failed = RewardInputs.from_record(record(VerifierResult(error=VerifierError.TIMEOUT)))
    assert failed.available()["verifier"] == [None]


def test_the_record_keeps_the_verifiers_result_without_its_files():
    result = VerifierResult(exit_code=0, reward=1.0, rewards={"reward": 1.0}, stdout_tail="2 passed",
                            files={"ctrf.json": "{}", "reward.txt": "1"}, duration_s=3.2)
    kept = RolloutRecord.model_validate_json(record(result).model_dump_json()).verifier
    assert kept is not None and kept.reward == 1.0 and kept.stdout_tail == "2 passed" and kept.duration_s == 3.2
    assert kept.files == ["ctrf.json", "reward.txt"] and kept.scores() == {"reward": 1.0}


# --- the job file ----------------------------------------------------------------------------------

def test_builtin_syntax_and_its_refusals():
    assert RewardConfig.model_validate({"builtin": "verifier", "keys": {"correctness": 1.0}}).keys == {
        "correctness": 1.0}
    for bad, said in (({"builtin": "judge"}, "not one of veri's"),
                      ({"file": "r.py", "keys": {"a": 1.0}}, "`keys` weighs reward.json's keys"),
                      ({"builtin": "verifier", "source": "x"}, "exactly one of `file`, `source` and `builtin`"),
                      ({"builtin": "verifier", "keys": {"a/b": 1.0}}, "without '/'"),
                      ({"builtin": "verifier", "function": "f"}, "remove it from a builtin")):
        with pytest.raises(ValidationError, match=said):
            RewardConfig.model_validate(bad)


def test_the_verifier_reward_needs_a_harbor_dataset():
    with pytest.raises(ProblemsError) as raised:
        load_reward_functions([RewardConfig(builtin="verifier")], ["prompt", "expected_url"])
    [problem] = raised.value.problems
    assert problem.where == "rewards[0].builtin" and "dataset: {harbor: DIR}" in problem.fix


def test_a_harbor_job_without_rewards_is_scored_by_its_verifier(tmp_path: Path, monkeypatch):
    from veri.services.trainer.validation_hook import TRAINER_CHECKS

    # no Docker daemon to ask whether the fixture's FROM image is local (tests/core/test_harbor_images.py checks that)
    monkeypatch.setattr("veri.validation.harbor_checks.docker_has_image", lambda: None)
    job_dir = make_job_dir(tmp_path)
    shutil.copytree(HARBOR_FIXTURES / "reward-txt", job_dir / "tasks" / "reward-txt")
    config = job(dataset={"harbor": "tasks"})
    del config["rewards"]
    report = check_config(write_job(job_dir, config), base_dir=job_dir, trainer_checks=TRAINER_CHECKS)
    assert report.problems == []
    assert report.config is not None and report.config.rewards == [RewardConfig(builtin="verifier")]
    assert any(note.startswith("rewards: the task's verifier") for note in report.notes)

    jsonl = job()
    del jsonl["rewards"]
    problems = check_config(write_job(job_dir, jsonl), base_dir=job_dir).problems
    assert [p.where for p in problems] == ["rewards"]  # only a Harbor dataset has a default


def test_the_collectors_record_carries_the_verifier_and_the_scorer_reads_it():
    from veri.core.launch import LaunchResult
    from veri.loop.collect.collect import CollectedRollout, GroupCollector, verifier_files

    collector = GroupCollector(None, None, None, max_response_length=4096)  # type: ignore[arg-type]
    result = VerifierResult(exit_code=0, reward=1.0, rewards={"reward": 1.0, "correctness": 1.0},
                            files={"ctrf.json": "{}"}, duration_s=2.0)
    launch = LaunchResult(rollout_id="r-1", status=RolloutStatus.COMPLETED, exit_code=0, started_at=0.0,
                          duration_s=5.0, verifier=result)
    made = collector._record(0, 0, TASK, 0, launch, bridged_chain())
    assert made.verifier is not None and made.verifier.scores() == {"reward": 1.0, "correctness": 1.0}
    assert verifier_files(CollectedRollout(made, launch)) == {"ctrf.json": "{}"}
    with RewardScorer(load_reward_functions([RewardConfig(builtin="verifier")], COLUMNS), 5.0) as scorer:
        assert scorer.score(RewardInputs.from_record(made)).reward == 1.0
    plain = collector._record(0, 0, TASK, 0, launch.model_copy(update={"verifier": None}), bridged_chain())
    assert plain.verifier is None


def test_the_default_applies_to_a_job_built_in_code_too(tmp_path: Path):
    from veri.core.config import JobConfig
    from veri.core.dataset import DatasetConfig

    config = JobConfig(model=tmp_path, backend="hf", dataset=DatasetConfig(harbor=tmp_path), harness_bundle=tmp_path)
    assert config.rewards == [RewardConfig(builtin="verifier")]
    with pytest.raises(ValidationError, match="rewards"):
        JobConfig(model=tmp_path, backend="hf", dataset=DatasetConfig(path=tmp_path / "t.jsonl"),
                  harness_bundle=tmp_path)
