"""Each rollout route declared once: its path, the protocol it speaks (the span's and the metrics'
label) and the error shape its clients read. Routers, the span, `/metrics` and the error handler all
take them from here, so a route cannot be counted as one protocol and answered in another's shape."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from veri.core.records import Protocol

PREFIX = "/r/{rollout_id}"


class ErrorShape(StrEnum):
    OPENAI = "openai"  # {"error": {"message", "type", "param", "code"}}
    ANTHROPIC = "anthropic"  # {"type": "error", "error": {"type", "message"}}


@dataclass(frozen=True)
class RolloutRoute:
    path: str  # under PREFIX
    protocol: str  # a `Protocol` for the routes that record spans
    errors: ErrorShape
    tool_id_prefix: str = "call_"  # how the ids of the tool calls it answers start

    @property
    def template(self) -> str:
        """The route as the router (and the metrics' `route` label) spells it."""
        return PREFIX + self.path


CHAT_COMPLETIONS = RolloutRoute("/v1/chat/completions", Protocol.OPENAI_CHAT, ErrorShape.OPENAI)
COMPLETIONS = RolloutRoute("/v1/completions", Protocol.OPENAI_COMPLETIONS, ErrorShape.OPENAI)
RESPONSES = RolloutRoute("/v1/responses", Protocol.OPENAI_RESPONSES, ErrorShape.OPENAI)
MODELS = RolloutRoute("/v1/models", "openai.models", ErrorShape.OPENAI)
MESSAGES = RolloutRoute("/v1/messages", Protocol.ANTHROPIC_MESSAGES, ErrorShape.ANTHROPIC, tool_id_prefix="toolu_")
COUNT_TOKENS = RolloutRoute("/v1/messages/count_tokens", Protocol.ANTHROPIC_MESSAGES, ErrorShape.ANTHROPIC)

ROUTES = (CHAT_COMPLETIONS, COMPLETIONS, RESPONSES, MODELS, MESSAGES, COUNT_TOKENS)
BY_TEMPLATE = {route.template: route for route in ROUTES}

_ROLLOUT_PATH = re.compile(r"^/r/[^/]+(?P<path>/.*)$")


def error_shape(path: str) -> ErrorShape:
    """The error shape for a request's path: its route's, or for a path no route has (a typo, a wrong
    method) that of the API it is under, so an Anthropic SDK still reads an Anthropic error."""
    match = _ROLLOUT_PATH.match(path)
    rest = match["path"] if match else path
    for route in ROUTES:
        if rest == route.path:
            return route.errors
    return ErrorShape.ANTHROPIC if rest.startswith(MESSAGES.path) else ErrorShape.OPENAI
