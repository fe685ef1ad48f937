"""Reading a service's log the way a log shipper does: every line one JSON object (infra/logging.py)."""

from __future__ import annotations

import json
from typing import Any

REQUIRED_KEYS = ("timestamp", "level", "service", "event")


def json_events(text: str, service: str) -> list[dict[str, Any]]:
    """Every line of `text` as an event; fails on a line that is not JSON or lacks a required key."""
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            event = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {number} of the {service} log is not JSON: {line!r}") from None
        assert isinstance(event, dict), f"line {number} of the {service} log is not an object: {line!r}"
        missing = [key for key in REQUIRED_KEYS if key not in event]
        assert not missing, f"line {number} of the {service} log lacks {missing}: {line!r}"
        assert event["service"] == service and event["timestamp"].endswith("Z"), line
        events.append(event)
    assert events, f"the {service} log is empty"
    return events


def requests_logged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The access log's events: one per request, with its route, status and duration."""
    found = [event for event in events if event["event"] == "request"]
    for event in found:
        assert {"method", "path", "route", "status", "duration_ms"} <= event.keys(), event
    return found
