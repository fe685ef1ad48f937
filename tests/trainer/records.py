"""Rollout records built from token ids (real episodes), scored or failed, for trainer tests."""

from __future__ import annotations

from pathlib import Path

from testkit.spans import make_span
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.core.rules import Rule, Verdict

EOS = 5998  # any id < the tiny model's vocab works; tests pass the tokenizer's real eos where it matters


def two_turn_spans(seed: int, eos: int = EOS) -> list:
    """A bridged two-call rollout: sampled, environment (3 tokens), sampled + eos."""
    first = make_span(0, [10 + seed, 11, 12], [20 + seed, 21, eos], logprobs=[-1.0, -1.5, -0.5])
    second = make_span(1, [*first.prompt_token_ids, *first.completion_token_ids, 30, 31, 32],
                       [40 + seed, eos], logprobs=[-2.0, -0.25], bridged_from=0)
    return [first, second]


def scored(task: int, index: int, reward: float | None, *, eos: int = EOS, name: str = "reward") -> RolloutRecord:
    """A completed rollout with `reward` (None: a reward_error)."""
    spans = two_turn_spans(task * 10 + index, eos)
    if reward is None:
        outcome = RewardOutcome(reward=None, per_function={name: None},
                                verdicts=[Verdict.of(Rule.REWARD_ERROR, "raised")])
    else:
        outcome = RewardOutcome(reward=reward, per_function={name: reward})
    return RolloutRecord(rollout_id=f"r-{task}-{index}", task_index=task, rollout_index=index,
                         status=RolloutStatus.COMPLETED, spans=spans, episode=build_episode(spans), reward=outcome)


def failed(task: int, index: int, status: RolloutStatus = RolloutStatus.FAILED, *, spans: bool = True,
           eos: int = EOS) -> RolloutRecord:
    """A rollout a rule rejected before scoring (harness failed / timed out, or made no call)."""
    taken = two_turn_spans(task * 10 + index, eos) if spans else []
    exit_code = 1 if status == RolloutStatus.FAILED else None
    episode = build_episode(taken, status, exit_code=exit_code)
    return RolloutRecord(rollout_id=f"r-{task}-{index}", task_index=task, rollout_index=index, status=status,
                         exit_code=exit_code, spans=taken, episode=episode)


def model_logprobs(model_dir: Path, prompt: list[int], completion: list[int], temperature: float = 1.0) -> list[float]:
    """The model's own logprobs of `completion` after `prompt` at `temperature` (what a sampler with the
    trainer's weights records)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logprobs.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()
