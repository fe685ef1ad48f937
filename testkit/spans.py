"""Build realistic spans (the proxy's `Span` records) from token ids, for episode and debug tests."""

from __future__ import annotations

from veri.core.records import PromptSource, Protocol, Span, TokenFidelity


def make_span(
    index: int,
    prompt: list[int],
    completion: list[int],
    *,
    logprobs: list[float] | None = None,
    bridged_from: int | None = None,
    version: int = 0,
    fidelity: TokenFidelity = TokenFidelity.CAPTURED,
    messages: list[dict] | None = None,
    reply: str = "",
) -> Span:
    source = PromptSource.BRIDGED if bridged_from is not None else PromptSource.FULL_RENDER
    return Span(
        rollout_id="r-1", request_index=index, path="/v1/chat/completions", protocol=Protocol.OPENAI_CHAT,
        request={}, response={}, messages=messages or [{"role": "user", "content": "hi"}],
        reply_message={"role": "assistant", "content": reply},
        prompt_token_ids=prompt, completion_token_ids=completion,
        completion_logprobs=logprobs if logprobs is not None else [-0.5] * len(completion),
        finish_reason="stop", policy_version=version, prompt_source=source,
        prompt_source_reason="test", bridged_from=bridged_from, token_fidelity=fidelity,
        sampling={}, started_at=0.0, duration_s=0.0,
    )


def bridged_chain() -> list[Span]:
    """Three turns, each prompt = the previous prompt + completion + environment tokens."""
    first = make_span(0, [1, 2, 3], [10, 11, 99], logprobs=[-0.1, -0.2, -0.3])
    second = make_span(1, [1, 2, 3, 10, 11, 99, 50, 51], [12, 99], logprobs=[-0.4, -0.5], bridged_from=0)
    third = make_span(2, [*second.prompt_token_ids, 12, 99, 60], [13, 99], logprobs=[-0.6, -0.7], bridged_from=1)
    return [first, second, third]
