"""The capture path every chat-style route shares: prompt plan -> policy -> parsed reply -> span.

Routes convert their protocol into a `ChatTurn` and hand it to `answering.py`, which notes the call,
calls `sample`, formats the reply in the route's protocol, then `record`s the span (durably) before
anything is sent to the harness. Every call goes to the policy replica its session is pinned to
(`replicas.py`), and its span says which.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any

from veri.core.records import PromptSource, Protocol, Span, TokenFidelity
from veri.services.proxy.errors import PolicyUnavailable
from veri.services.proxy.history import RequestIdentity
from veri.services.proxy.metrics import ProxyMetrics
from veri.services.proxy.policy_client import PolicyCompletion
from veri.services.proxy.rendering import ChatRendering
from veri.services.proxy.replicas import PolicyReplicas
from veri.services.proxy.samples import ChatTurn, RawSample, Sample
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.store import SessionRow, SpanStore
from veri.services.proxy.timing import phase
from veri.services.proxy.tool_calls import split_tool_calls

# A retry waits for a try of the same request still in flight; past the policy's own timeout (plus
# this) that try is taken for lost, and the retry samples afresh.
IN_FLIGHT_GRACE_S = 30.0

def client_finish_reason(policy_reason: str) -> str:
    """The OpenAI finish reason for a policy's: "stop" stays; anything else the server cut short
    (length, vLLM's repetition detection) is "length" to the harness. The span keeps the policy's."""
    return "stop" if policy_reason == "stop" else "length"


class CaptureService:
    def __init__(self, settings: ProxySettings, store: SpanStore, rendering: ChatRendering, policy: PolicyReplicas,
                 metrics: ProxyMetrics):
        self.settings = settings
        self.store = store
        self.rendering = rendering
        self.policy = policy
        self.metrics = metrics

    def sampling_for(self, client_max_tokens: int | None) -> dict[str, Any]:
        """The job's sampling; the client's own values are recorded but never used."""
        cap = self.settings.max_tokens
        return {
            "temperature": self.settings.temperature,
            "top_p": self.settings.top_p,
            "max_tokens": min(client_max_tokens, cap) if client_max_tokens else cap,
        }

    async def sample(
        self,
        session: SessionRow,
        turn: ChatTurn,
        *,
        path: str,
        protocol: Protocol,
        raw_request: dict[str, Any],
        tool_id_prefix: str,
        identity: RequestIdentity | None = None,
        request_id: int | None = None,
    ) -> Sample:
        """Sample a new call. `request_id`: the store's note of it (`answering.py` takes and drops it),
        which the span that answers it names."""
        started_at = time.time()
        with phase("render"):
            plan = self.rendering.plan_prompt(self.store, session.rollout_id, turn.messages, turn.tools)
        sampling = self.sampling_for(turn.max_tokens)
        with phase("policy"):
            completion = await self._complete(session, plan.prompt_ids, sampling)
        with phase("parse"):
            ids, logprobs, stop_sequence = self._apply_stop_sequences(completion, turn.stop)
            parsed = self.rendering.parse(ids, turn.tools if turn.parse_tools else None, plan.prompt_ids)
        split = split_tool_calls(parsed, turn.tools if turn.parse_tools else None, tool_id_prefix)
        if stop_sequence is not None:
            finish = "stop_sequence"
        elif client_finish_reason(completion.finish_reason) == "length":
            finish = "length"
        else:
            finish = "tool_calls" if split.calls else "stop"
        return Sample(
            session=session, path=path, protocol=protocol, raw_request=raw_request, turn=turn, plan=plan,
            completion=completion, completion_ids=ids, completion_logprobs=logprobs, content=split.content,
            reasoning=parsed.reasoning_content or None, tool_calls=split.calls, finish=finish,
            stop_sequence=stop_sequence, sampling={**sampling, "stop_token_ids": self.rendering.stop_token_ids},
            started_at=started_at, tool_call_failures=split.failures, identity=identity, request_id=request_id,
        )

    async def answered_retry(self, session: SessionRow, identity: RequestIdentity) -> Span | None:
        """The span that answered this same request before, when this is the client's retry of it (its
        timeout, a lost reply): the retry is answered with that span's response and noted in its
        `retried_at`, so the rollout gets no second sample and no second branch. A try still in flight is
        waited for. None: a new call (or one whose earlier tries left no span), to be sampled."""
        if not identity.may_be_retry:
            return None
        arrived = time.time()
        patience = self.settings.policy_timeout_s + IN_FLIGHT_GRACE_S
        pause = 0.02
        while True:
            answered = self.store.answered_request(session.rollout_id, identity.key,
                                                   in_flight_since=time.time() - patience)
            if answered is None:
                return None
            if answered >= 0:
                return self.store.add_retry(session.rollout_id, answered, arrived)
            await asyncio.sleep(pause)  # the first try is still with the policy
            pause = min(pause * 2, 0.25)

    def record(self, sample: Sample, response: dict[str, Any]) -> Span:
        """Store the span durably. Must happen before the response reaches the harness."""
        reply = sample.reply_message()
        # The ids are not validated again (8k of them cost ~0.3 ms): the renderer made the prompt's, the
        # policy's reply (validated when read) carried the completion's; they are set once the rest is.
        span = Span(
            rollout_id=sample.session.rollout_id,
            request_index=-1,  # assigned by the store
            path=sample.path,
            protocol=sample.protocol,
            request=sample.raw_request,
            response=response,
            messages=sample.turn.messages,
            tools=sample.turn.tools,
            hosted_tools_dropped=sample.turn.hosted_tools_dropped,
            reply_message=reply,
            prompt_token_ids=[],
            completion_token_ids=[],
            completion_logprobs=sample.completion_logprobs,
            logprobs_absent=sample.completion.logprobs_absent,
            finish_reason=sample.completion.finish_reason,
            stop_sequence=sample.stop_sequence,
            policy_version=self._version(sample.completion),
            policy_version_end=sample.completion.policy_version_end,
            replica=self.policy.replica(sample.session.replica).index,
            cached_prompt_tokens=sample.completion.cached_prompt_tokens,
            prompt_source=sample.plan.source,
            prompt_source_reason=sample.plan.reason,
            bridged_from=sample.plan.bridged_from,
            token_fidelity=TokenFidelity.CAPTURED,
            sampling=sample.sampling,
            started_at=sample.started_at,
            duration_s=time.time() - sample.started_at,
            tool_call_failures=sample.tool_call_failures,
            client_retry_count=sample.identity.client_retry_count if sample.identity else None,
        )
        span.prompt_token_ids, span.completion_token_ids = sample.plan.prompt_ids, sample.completion_ids
        key = sample.plan.hashes.with_message(reply)
        with phase("span"):
            stored = self.store.add_span(span, prefix_hash=key, n_messages=len(sample.turn.messages) + 1,
                                         answers=sample.request_id, shared=sample.plan.shared)
        self.metrics.span_recorded(stored)
        return stored

    async def complete_raw(
        self, session: SessionRow, prompt_ids: list[int], client_max_tokens: int | None,
        *, identity: RequestIdentity | None = None, request_id: int | None = None,
    ) -> RawSample:
        """Legacy completions: the client's prompt ids go to the policy as they are."""
        started_at = time.time()
        sampling = self.sampling_for(client_max_tokens)
        completion = await self._complete(session, prompt_ids, sampling)
        return RawSample(prompt_ids, completion, {**sampling, "stop_token_ids": self.rendering.stop_token_ids},
                         started_at, identity, request_id)

    def record_raw(
        self, session: SessionRow, raw: RawSample, *, path: str, raw_request: dict[str, Any], response: dict[str, Any],
    ) -> Span:
        prompt_ids, completion, sampling, started_at = raw.prompt_ids, raw.completion, raw.sampling, raw.started_at
        span = Span(
            rollout_id=session.rollout_id, request_index=-1, path=path, protocol=Protocol.OPENAI_COMPLETIONS,
            request=raw_request, response=response, prompt_token_ids=prompt_ids,
            completion_token_ids=completion.token_ids, completion_logprobs=completion.logprobs,
            logprobs_absent=completion.logprobs_absent, finish_reason=completion.finish_reason,
            policy_version=self._version(completion), replica=self.policy.replica(session.replica).index,
            cached_prompt_tokens=completion.cached_prompt_tokens,
            prompt_source=PromptSource.FULL_RENDER, prompt_source_reason="raw completion prompt (no chat template)",
            token_fidelity=TokenFidelity.CAPTURED, sampling=sampling, started_at=started_at,
            duration_s=time.time() - started_at,
            reply_message={"role": "assistant", "content": self.rendering.decode(completion.token_ids)},
            client_retry_count=raw.identity.client_retry_count if raw.identity else None,
        )
        stored = self.store.add_span(span, prefix_hash=f"raw-{uuid.uuid4().hex}", n_messages=0,
                                     answers=raw.request_id)
        self.metrics.span_recorded(stored)
        return stored

    async def _complete(self, session: SessionRow, prompt_ids: list[int], sampling: dict[str, Any]) -> PolicyCompletion:
        """The session's replica samples; a failed or aborted call is counted against that replica.

        A backend that reports no version (vLLM) is given the announced one, read before and after the
        call. A new announcement in between means the weights were updated while the call was paused
        (asynchronous training: the trainer pauses vLLM, loads, announces, resumes): the completion is
        kept, stamped with the older version (which bounds its staleness) and the newer as
        `policy_version_end`; the trainer's importance ratio corrects its tokens either way."""
        announced = self.store.policy_version()
        try:
            with self.metrics.policy_call_timer(self.policy.replica(session.replica).index):
                completion = await self.policy.complete(
                    session.replica, prompt_ids, stop_token_ids=self.rendering.stop_token_ids, **sampling
                )
        except PolicyUnavailable:
            self.store.count_failed_call(self.policy.replica(session.replica).index)
            raise
        if completion.policy_version is not None:
            return completion
        ended = self.store.policy_version()
        return replace(completion, policy_version=announced, policy_version_end=ended if ended != announced else None)

    def _version(self, completion: PolicyCompletion) -> int:
        reported = completion.policy_version
        return reported if reported is not None else self.store.policy_version()

    def _apply_stop_sequences(
        self, completion: PolicyCompletion, stops: list[str]
    ) -> tuple[list[int], list[float], str | None]:
        """Cut the completion after the first token that completes a stop sequence.

        The kept ids are an exact prefix of what was sampled, so they stay trainable.
        """
        ids = completion.token_ids
        if not stops:
            return ids, completion.logprobs, None
        text = self.rendering.decode(ids)
        hits = [(text.find(stop), stop) for stop in stops if stop and stop in text]
        if not hits:
            return ids, completion.logprobs, None
        position, stop = min(hits)
        needed = position + len(stop)
        low, high = 1, len(ids)
        while low < high:  # shortest prefix whose text reaches the end of the stop sequence
            middle = (low + high) // 2
            if len(self.rendering.decode(ids[:middle])) >= needed:
                high = middle
            else:
                low = middle + 1
        return ids[:low], completion.logprobs[:low], stop
