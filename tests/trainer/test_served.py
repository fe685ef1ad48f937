"""A policy server that restarted is caught before its rollouts are scored (`weights.served`): each server
says which process serves; one that changed since the job gave it its weights served its model folder's
weights meanwhile, and a rollout with a span it served then is rejected (`policy_server_restarted`),
whatever version the span carries. Here against probes the test restarts; with real servers:
tests/trainer/test_restarted_policy.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from testkit.spans import make_span
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import LaunchResult
from veri.core.policy_api import ServerProcess
from veri.core.records import ReplicaStats
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Effect, Rule
from veri.infra.http import HttpCallError
from veri.loop.collect.collect import CollectedRollout
from veri.services.trainer.errors import WeightSyncError
from veri.services.trainer.grpo.rollout_func import HarnessRollouts
from veri.services.trainer.weights.served import CLOCK_SLACK_S, ServedWeights


class Probe:
    """A policy server's process, as its admin client reports it; `restart()` makes a new one."""

    def __init__(self, url: str) -> None:
        self.base_url = url
        self.process = ServerProcess.new()
        self.down = False

    def restart(self) -> None:
        self.process = ServerProcess.new()

    def server_process(self) -> ServerProcess:
        if self.down:
            raise HttpCallError("policy server", self.base_url, "GET", "/policy_version", None, "connection refused",
                                "start it")
        return self.process


def replicas(*urls: str) -> list[ReplicaStats]:
    return [ReplicaStats(replica=index, url=url, rank=None, sessions=0, open_sessions=0, requests=0,
                         failed_requests=0, prompt_tokens=0, cached_prompt_tokens=None, hit_rate=None)
            for index, url in enumerate(urls)]


def rollout(name: str, *calls: tuple[float, int | None]) -> CollectedRollout:
    """A rollout whose calls (started at, replica) each took 0.5 s; every span carries the announced version 3."""
    spans = []
    for index, (started_at, replica) in enumerate(calls):
        prompt = [10, 11] if index == 0 else [*spans[-1].prompt_token_ids, *spans[-1].completion_token_ids, 30]
        span = make_span(index, prompt, [20 + index, 5], version=3, bridged_from=index - 1 if index else None)
        spans.append(span.model_copy(update={"started_at": started_at, "duration_s": 0.5, "replica": replica}))
    record = RolloutRecord(rollout_id=name, task_index=0, rollout_index=0, status=RolloutStatus.COMPLETED,
                           spans=spans, episode=build_episode(spans))
    return CollectedRollout(record, LaunchResult(rollout_id=name, status=RolloutStatus.COMPLETED, exit_code=0,
                                                 started_at=0.0, duration_s=1.0))


def reject(served: ServedWeights, *collected: CollectedRollout) -> dict[str, list]:
    """rollout id -> its policy_server_restarted verdicts, after the rollout function's check."""
    logged: list[str] = []
    rollouts = SimpleNamespace(served=served, archive=SimpleNamespace(log=logged.append))
    checked = HarnessRollouts._reject_restarted(rollouts, 3, list(collected))  # type: ignore[arg-type]
    return {r.record.rollout_id: [v for v in r.record.episode.verdicts if v.rule == Rule.POLICY_SERVER_RESTARTED]
            for r in checked}


def test_a_server_that_restarted_since_the_job_gave_it_weights_rejects_what_it_served_since():
    first, second = Probe("http://policy:8000"), Probe("http://policy-1:8000")
    lines: list[str] = []
    served = ServedWeights([first, second], lambda: replicas(first.base_url, second.base_url), lines.append)
    served.noted()  # the step's weights are in: each server's process holds them
    before = time.time() - 10 * CLOCK_SLACK_S  # calls that ended long before the job last saw the server
    first.restart()
    now = time.time()
    verdicts = reject(served, rollout("old", (before, 0)), rollout("on-restarted", (before, 0), (now, 0)),
                      rollout("on-the-other", (now, 1)), rollout("no-replica", (now, None)))
    assert [rollout_id for rollout_id, found in verdicts.items() if found] == ["on-restarted", "no-replica"]
    [verdict] = verdicts["on-restarted"]
    assert (verdict.effect, verdict.span, verdict.details) == (Effect.REJECT, 1, {"server": first.base_url})
    assert verdict.message.startswith(f"span 1 was served by the policy server at {first.base_url} after it restarted")
    assert "the next weight update loads the job's weights into it again" in verdict.message


def test_the_window_closes_when_the_job_gives_the_restarted_server_its_weights_again():
    probe = Probe("http://policy:8000")
    lines: list[str] = []
    served = ServedWeights([probe], lambda: replicas(probe.base_url), lines.append)
    served.noted()
    meanwhile = time.time()  # a call the restarted process served (its start is in no way known to the job)
    probe.restart()
    served.noted()  # the next sync loaded the job's weights into the new process
    assert "restarted" in lines[-1] and "rollouts with a span it served meanwhile are rejected" in lines[-1]
    time.sleep(CLOCK_SLACK_S + 0.1)
    verdicts = reject(served, rollout("meanwhile", (meanwhile, 0)), rollout("later", (time.time(), 0)))
    assert [bool(found) for found in verdicts.values()] == [True, False]
    assert "before the job's weights were loaded into it again" in verdicts["meanwhile"][0].message


def test_a_check_that_finds_the_same_process_vouches_for_what_came_before_it():
    probe = Probe("http://policy:8000")
    served = ServedWeights([probe], lambda: replicas(probe.base_url), lambda line: None)
    served.noted()
    early = time.time()
    assert reject(served, rollout("early", (early, 0))) == {"early": []}  # the same process: nothing to say
    time.sleep(CLOCK_SLACK_S + 0.6)
    served.unvouched()  # a later step's check: still the same process
    probe.restart()
    verdicts = reject(served, rollout("early", (early, 0)), rollout("late", (time.time(), 0)))
    assert [bool(found) for found in verdicts.values()] == [False, True]


def test_a_server_that_does_not_answer_cannot_vouch_and_one_that_never_says_fails_the_sync():
    probe = Probe("http://policy:8000")
    lines: list[str] = []
    served = ServedWeights([probe], lambda: replicas(probe.base_url), lines.append)
    served.noted()
    probe.down = True
    [verdict] = reject(served, rollout("unsure", (time.time(), 0)))["unsure"]
    assert "while it did not answer which process serves" in verdict.message
    assert "did not say which process serves (no answer: connection refused)" in lines[-1]
    with pytest.raises(WeightSyncError, match="does not say which process serves"):
        served.noted()


def test_replicas_are_matched_to_servers_by_url_else_by_position():
    first, second = Probe("http://127.0.0.1:8001"), Probe("http://127.0.0.1:8002")
    # The proxy names them as compose does, the trainer by their published ports: matched by position.
    served = ServedWeights([first, second], lambda: replicas("http://policy:8000", "http://policy-1:8000/"),
                           lambda line: None)
    served.noted()
    second.restart()
    now = time.time()
    verdicts = reject(served, rollout("first", (now, 0)), rollout("second", (now, 1)))
    assert [bool(found) for found in verdicts.values()] == [False, True]


def test_with_no_restart_the_proxy_is_not_asked_which_replica_is_which():
    def never() -> list[ReplicaStats]:
        raise AssertionError("the proxy was asked for its replicas")

    probe = Probe("http://policy:8000")
    served = ServedWeights([probe], never, lambda line: None)
    assert served.unvouched() == {}  # before the job gave any weights: nothing to vouch for
    served.noted()
    assert served.unvouched() == {} and served.unvouched() == {}
