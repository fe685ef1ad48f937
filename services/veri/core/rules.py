"""The named rules that reject or degrade a rollout: each with its effect and its fix (`RULES`), and the
verdict one rule gives one rollout (`Verdict`), which lands in the rollout record. Episodes
(`core/episodes.py`) apply most of them; the trainer, the rewards and the launcher's verifier the rest.
The reference page docs/reference/rules.md is generated from `RULES`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Rule(StrEnum):
    NO_SPANS = "no_spans"
    TOKEN_IDS_ABSENT = "token_ids_absent"
    LOGPROBS_ABSENT = "logprobs_absent"
    HARNESS_FAILED = "harness_failed"
    HARNESS_TIMEOUT = "harness_timeout"
    HISTORY_REWRITTEN = "history_rewritten"
    RESPONSE_TRUNCATED = "response_truncated"
    REWARD_ERROR = "reward_error"
    POLICY_VERSION_STALE = "policy_version_stale"
    POLICY_SERVER_RESTARTED = "policy_server_restarted"
    COMPLETION_TRUNCATED = "completion_truncated"
    VERIFIER_NO_REWARD = "verifier_no_reward"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_ERROR = "verifier_error"


class Effect(StrEnum):
    REJECT = "reject"  # masked out of the loss; the group's other members keep their advantages
    DEGRADE = "degrade"  # trained, but on less than the whole rollout
    MASK = "mask"  # left out of the loss, its reward still in its group's baseline (TRL's truncated completions)


@dataclass(frozen=True)
class RuleSpec:
    effect: Effect
    summary: str  # what happened, in general
    fix: str  # what to do


RULES: dict[Rule, RuleSpec] = {
    Rule.NO_SPANS: RuleSpec(
        Effect.REJECT,
        "the harness made no model call through the capture proxy",
        "point the harness's SDK at OPENAI_BASE_URL / ANTHROPIC_BASE_URL (no hard-coded endpoint or key);"
        " if it crashed before its first call, read the rollout's log",
    ),
    Rule.TOKEN_IDS_ABSENT: RuleSpec(
        Effect.REJECT,
        "a span has no token ids or logprobs, so the rollout cannot be trained on (and its chain cannot be"
        " verified)",
        "serve the policy with a backend that returns token ids and logprobs (vllm, hf) and send every call"
        " through the capture proxy",
    ),
    Rule.LOGPROBS_ABSENT: RuleSpec(
        Effect.REJECT,
        "a span has token ids but no logprobs for its completion, so the rollout cannot be trained on (GRPO"
        " needs the sampling logprobs)",
        "the policy server returned no logprobs: run vLLM with --logprobs-mode processed_logprobs --max-logprobs -1"
        " as veri's policy image does (or use the hf backend), and keep any gateway in front of it from"
        " dropping `logprobs`",
    ),
    Rule.HARNESS_FAILED: RuleSpec(
        Effect.REJECT,
        "the harness exited non-zero",
        "read the rollout's log and fix the crash; a harness that finishes should exit 0 even with a wrong"
        " answer (the reward judges answers)",
    ),
    Rule.HARNESS_TIMEOUT: RuleSpec(
        Effect.REJECT,
        "the harness ran past harness_timeout_s and its sandbox was killed",
        "raise harness_timeout_s, or lower max_turns / sampling.max_tokens / max_parallel_rollouts (an"
        " overloaded policy slows every rollout); to penalise slow agents, stop the loop in the harness and"
        " exit 0 so the reward scores it",
    ),
    Rule.HISTORY_REWRITTEN: RuleSpec(  # records written before branches: such spans are rows of their own now
        Effect.DEGRADE,
        "(a record written before branches were trained) a span is not on the token chain that ends at the"
        " final answer, so it was not trained",
        "nothing: veri now trains every chain of a rollout as a row of its own (`Episode.branches`)",
    ),
    Rule.RESPONSE_TRUNCATED: RuleSpec(
        Effect.DEGRADE,
        "the row (every turn's sampled and environment tokens) is longer than max_response_length; it was cut"
        " there, so the end of the rollout is not trained on",
        "raise max_response_length, or lower max_turns / sampling.max_tokens; or make the harness's tool results"
        " shorter",
    ),
    Rule.REWARD_ERROR: RuleSpec(
        Effect.REJECT,
        "a reward function raised, timed out or returned no number",
        "fix the reward function (its error is in the message); raise reward_timeout_s if it is slow on purpose",
    ),
    Rule.POLICY_VERSION_STALE: RuleSpec(
        Effect.REJECT,
        "a span was sampled by a policy version older than the bound (max_staleness versions before the"
        " weights being trained; 0: the step's own), or by one this job never made (a policy server that"
        " restarted with its original weights, or one another job updates): it is not trained",
        "a slow group (max_staleness ≥ 1): raise max_staleness or lower harness_timeout_s; a policy"
        " server that restarted: nothing, the trainer pushes its weights again; if it keeps happening, give"
        " the job its own policy server",
    ),
    Rule.POLICY_SERVER_RESTARTED: RuleSpec(
        Effect.REJECT,
        "a span was served by a policy server between its restart and the job's next weight update: the"
        " server came back with its model folder's weights, not the version the span carries (vLLM's spans"
        " carry the version the trainer announced), so it is not trained",
        "nothing, if it is rare: the next weight update loads the job's weights into the server again; if the"
        " server keeps restarting, its log (`make logs`) says why (out of memory, a crash)",
    ),
    Rule.COMPLETION_TRUNCATED: RuleSpec(
        Effect.MASK,
        "a row of the rollout ends before the policy finished it (its last call cut at the token limit, or the"
        " row at max_response_length) and the job sets grpo.mask_truncated_completions: none of the rollout's"
        " rows is trained, its reward still counts in its group's baseline (as TRL does with that flag)",
        "nothing, if that is what the job asks for; to train these rollouts, raise sampling.max_tokens or"
        " max_response_length (or unset mask_truncated_completions)",
    ),
    # A Harbor task's verifier (its tests/test.sh, run after the agent). A verifier that could not say
    # anything is never a 0: a 0 is only what tests that ran wrote.
    Rule.VERIFIER_NO_REWARD: RuleSpec(
        Effect.REJECT,
        "the task's test.sh ended without writing /logs/verifier/reward.txt or reward.json: the tests"
        " gave no reward, so the rollout is not scored (never a 0)",
        "fix the task: test.sh must write a number to /logs/verifier/reward.txt (or a JSON object of numbers to"
        " reward.json) on every path, failing tests included (e.g. `if pytest ...; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt`); its output is in the verdict's details",
    ),
    Rule.VERIFIER_TIMEOUT: RuleSpec(
        Effect.REJECT,
        "the task's test.sh ran past [verifier] timeout_sec and was killed: no reward",
        "raise the task's [verifier] timeout_sec, or make its tests faster; a slow box (many parallel"
        " rollouts) slows the tests too",
    ),
    Rule.VERIFIER_ERROR: RuleSpec(
        Effect.REJECT,
        "the task's verifier could not give a reward: a reward file that is empty, not a number, not finite"
        " (nan, inf) or not a JSON object, or a verifier that could not run at all",
        "fix the task's test.sh so it writes one finite number to reward.txt (or a JSON object of finite"
        " numbers to reward.json); a verifier that could not run says why in the message",
    ),
}


class VerifierError(StrEnum):
    """Why a task's verifier gave no reward (the launcher's verdict, core/launch.py VerifierResult)."""

    NONE = "none"  # the tests ran and their reward files were read
    NO_REWARD = "no_reward"  # neither reward.txt nor reward.json
    TIMEOUT = "timeout"  # test.sh ran past its timeout
    ERROR = "error"  # unreadable reward files, or the verifier could not run


VERIFIER_RULES = {VerifierError.NO_REWARD: Rule.VERIFIER_NO_REWARD, VerifierError.TIMEOUT: Rule.VERIFIER_TIMEOUT,
                  VerifierError.ERROR: Rule.VERIFIER_ERROR}


class Verdict(BaseModel):
    """One rule that fired for one rollout: what happened here, and what to do."""

    model_config = ConfigDict(extra="forbid")

    rule: Rule
    effect: Effect
    message: str
    fix: str
    span: int | None = Field(default=None, description="request_index of the span concerned")
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, rule: Rule, message: str, *, span: int | None = None, **details: Any) -> Verdict:
        spec = RULES[rule]
        return cls(rule=rule, effect=spec.effect, message=message, fix=spec.fix, span=span, details=details)
