"""schemathesis over the proxy's rollout routes (chat completions, completions, messages,
count_tokens, responses, models), valid and invalid bodies, on one open session of the real proxy:
no 5xx, every refusal in its protocol's error shape. CI-sized; `make reliability` runs it larger
(bench/reliability/scenarios/proxy_hostile.py)."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from bench.reliability.scenarios import proxy_hostile as hostile
from testkit.servers import RunningServer
from veri.services.proxy.control_client import ControlClient

pytestmark = pytest.mark.needs("process")

EXAMPLES_PER_ROUTE = 12


def test_fuzz_schema_gives_every_rollout_route_its_body(proxy: RunningServer) -> None:
    schema = hostile.fuzz_schema(httpx.get(f"{proxy.url}/openapi.json", timeout=30).json())
    bodies = {path.removeprefix("/r/{rollout_id}/v1"): operations["post"]["requestBody"]
              for path, operations in schema["paths"].items() if "post" in operations}
    assert set(bodies) == set(hostile.ROLLOUT_ROUTES)
    assert "/r/{rollout_id}/v1/models" in schema["paths"]
    assert not any(path.startswith("/control") for path in schema["paths"])


def test_fuzzed_rollout_calls_get_no_5xx_and_protocol_shaped_errors(proxy: RunningServer,
                                                                   control: ControlClient) -> None:
    statuses: Counter[int] = Counter()
    calls, server_errors, problems = hostile.fuzz(proxy.url, control, max_examples=EXAMPLES_PER_ROUTE,
                                                  statuses=statuses)
    assert problems == [], problems
    assert server_errors == 0
    # Both kinds were sent: bodies the proxy samples for and bodies it refuses.
    assert statuses[200] > 0 and statuses[400] > 0, statuses
    assert calls == sum(statuses.values()) >= len(hostile.ROLLOUT_ROUTES) * 2
