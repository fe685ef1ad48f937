"""The sampling contract: every model call of a job samples from the distribution the trainer scores.

TRL's trainer scores a sampled token with log_softmax(logits / temperature) over the whole vocabulary,
and the importance ratio is exp(trainer logprob - sampler logprob). Anything a sampler applies on top
of the temperature (top_k, top_p < 1, min_p, repetition / presence / frequency penalties) draws the
tokens from another distribution than the one the trainer scores: the ratio is then off on every token,
even at equal weights (vLLM's processed logprobs are renormalised over what survives; the trainer's are
not). So a job samples with its temperature alone, and each place that could add something says so:

  the job file     `sampling.temperature` at least TEMPERATURE_FLOOR, `top_p` 1 only; what the trainer
                   cannot match is refused with why (UNMATCHED: `sampling:` and `grpo:` keys alike)
  the proxy        sends every field a server could otherwise take from the model folder's
                   generation_config.json at its neutral value (NEUTRAL), whoever started the server
  vLLM             started with SERVER_FLAGS (appliance/policy_compose.py): vLLM's neutral defaults,
                   not the model's, for anything a request leaves out
  the hf backend   samples with its own sampler (policy/hf/sampler.py): generation_config.json gives it
                   only the stop ids
  the commands     `veri train` and `veri eval` check at start that the proxy samples as they assume
                   (`differences`; rollouts/stack.py `check_sampling`)
"""

from __future__ import annotations

from typing import Any

from veri.core.records import CaptureConfig

# Below this the samplers are all but greedy (vLLM and the hf backend turn greedy under 1e-5, where
# the trainer still divides by the temperature): a group's samples barely differ, so GRPO's advantages
# vanish, and the trainer's logits / T magnify its numerical differences from the sampler by 1 / T.
TEMPERATURE_FLOOR = 0.1

# What vLLM 0.31 takes from generation_config.json for a field a request leaves out
# (ModelConfig.get_diff_sampling_param: temperature, top_p, top_k, min_p, repetition_penalty,
# max_new_tokens), and the penalties the OpenAI API adds; temperature, top_p and max_tokens the proxy
# sends from the job. Neutral values: what the trainer scores.
NEUTRAL: dict[str, Any] = {
    "top_k": 0,  # vLLM: 0 (or -1) keeps every token
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}

# vLLM's own defaults instead of the model folder's generation_config.json (vllm/engine/arg_utils.py
# `--generation-config`: "auto" reads the folder, "vllm" does not).
SERVER_FLAGS = ("--generation-config", "vllm")

_WHY = ("TRL's trainer scores every token with log_softmax(logits / temperature) over the whole vocabulary, so"
        " a sampler that {does} draws from another distribution and every importance ratio is off, even at"
        " equal weights")

# Sampling settings the trainer cannot match -> why (the refusal's message in `sampling:` and `grpo:`).
UNMATCHED: dict[str, str] = {
    "top_k": _WHY.format(does="keeps only the top k tokens"),
    "min_p": _WHY.format(does="drops the tokens below min_p of the top one"),
    "repetition_penalty": _WHY.format(does="penalises repeated tokens"),
    "presence_penalty": _WHY.format(does="penalises tokens already present"),
    "frequency_penalty": _WHY.format(does="penalises frequent tokens"),
    "top_p": _WHY.format(does="keeps only the top-p nucleus"),
}
UNMATCHED_FIX = "remove it: a job samples with `sampling.temperature` alone"


def temperature_problem(temperature: float) -> str | None:
    """Why a job cannot sample at `temperature` ("what; fix", the schema's form), or None."""
    if temperature >= TEMPERATURE_FLOOR:
        return None
    return (f"is {temperature:g}, below veri's floor of {TEMPERATURE_FLOOR:g}: the samplers turn (nearly) greedy"
            " while the trainer divides the logits by it, so the group's samples barely differ and the"
            f" importance ratio amplifies numerical noise; set `sampling.temperature` to {TEMPERATURE_FLOOR:g} or"
            " more (1.0, TRL's default, samples the model as it is); greedy decoding is for evaluating, not"
            " training: `veri eval --temperature 0` against a proxy started with `--temperature 0`")


def top_p_problem(top_p: float) -> str | None:
    if top_p >= 1.0:
        return None
    return f"is {top_p:g}: {UNMATCHED['top_p']}; set `sampling.top_p: 1.0` (or remove it)"


def differences(served: CaptureConfig, *, temperature: float, top_p: float, max_tokens: int) -> list[str]:
    """What the proxy samples with that differs from what a command assumes ("temperature 1 (wanted 0.7)")."""
    wanted = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
    found = {"temperature": served.temperature, "top_p": served.top_p, "max_tokens": served.max_tokens}
    return [f"{name} {found[name]:g} (wanted {wanted[name]:g})" for name in wanted
            if abs(found[name] - wanted[name]) > 1e-9]
