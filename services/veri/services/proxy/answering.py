"""The one place a capture-path call is answered: a client's retry from the span that answered its
first try; a new call noted in flight (so a retry on any worker finds it), sampled, put in the route's
protocol and recorded, the span durable before the response leaves.

A call that fails after its note (the policy, the formatting, the span write: SQLite busy, disk
full) has its note dropped on the way out, whatever the failure. The client's retry is then sampled
afresh at once instead of waiting out the note (`policy_timeout_s` + 30 s): the failed try's
completion reached no client and no span holds it, so nothing trainable is lost and the retry's
sample is the one the rollout continues from. A try whose span was committed before something later
failed has its note answered already, so its retry is answered from that span (no second sample).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from veri.core.records import Protocol
from veri.services.proxy.deps import RolloutCall
from veri.services.proxy.rollout_routes import RolloutRoute
from veri.services.proxy.samples import ChatTurn, Sample

Response = dict[str, Any]


async def recorded_response(call: RolloutCall[Any], answer: Callable[[int], Awaitable[Response]]) -> Response:
    """A retry's recorded response, or `answer(note)`'s for a new call (`note`: the store's id of this
    try, which the span that answers it names); the note goes with any failure of `answer`."""
    capture, session = call.capture, call.session
    if (answered := await capture.answered_retry(session, call.identity)) is not None:
        return answered.response
    note = capture.store.begin_request(session.rollout_id, call.identity.key)
    try:
        return await answer(note)
    except BaseException:
        capture.store.drop_request(note)  # unanswered only: a span already committed keeps its note
        raise


async def chat_response(call: RolloutCall[Any], route: RolloutRoute, turn: ChatTurn,
                        respond: Callable[[Sample], Response]) -> Response:
    """A chat-style call (chat completions, Messages, Responses): sampled from `turn`, answered in the
    route's protocol by `respond`, recorded."""

    async def answer(note: int) -> Response:
        sample = await call.capture.sample(
            call.session, turn, path=route.path, protocol=Protocol(route.protocol), raw_request=call.body,
            tool_id_prefix=route.tool_id_prefix, identity=call.identity, request_id=note,
        )
        response = respond(sample)
        call.capture.record(sample, response)
        return response

    return await recorded_response(call, answer)
