"""A reward for proving the loop on the tiny random model (config/url_extract_vllm_cpu.yaml), not for
learning anything: the model cannot solve a task, but GRPO needs rewards that differ inside a group
for the weights to move and a weight sync to be observable. It counts the distinct characters of the
final reply (0..1), which differs from one random sample to the next."""

from __future__ import annotations


def reply_variety(prompts, completions, **kwargs):
    texts = [c if isinstance(c, str) else "".join(str(m.get("content") or "") for m in c) for c in completions]
    return [min(len(set(text)), 40) / 40 for text in texts]
