"""The hf policy server's Prometheus metrics and its `GET /metrics` (vLLM serves its own `/metrics`).

    veri_policy_requests_in_flight{route}, veri_policy_requests_total{route,status}, veri_policy_request_seconds{route}
    veri_policy_prompt_tokens_total, veri_policy_generated_tokens_total     over answered completions
    veri_policy_weight_version                   the version being served (what /policy_version says)
    veri_policy_weight_reloads_total             weight updates applied
    veri_policy_engine_failures_total            decode steps that failed their requests
    veri_policy_waiting_requests, veri_policy_active_rows                   the batcher's queue and batch now

The batcher's figures are read when scraped (its own counters, `GET /stats`), so they cannot drift
from what the engine did. The policy's port is on the control network only; no token, as /stats.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from veri.core.policy_api import CompletionResponse
from veri.infra.metrics import RouteMetrics, metrics_payload
from veri.services.policy.hf.batcher import Batcher


class BatcherCollector(Collector):
    def __init__(self, batcher: Batcher) -> None:
        self.batcher = batcher

    def collect(self) -> Iterator[Metric]:
        snapshot = self.batcher.snapshot()
        yield GaugeMetricFamily("veri_policy_weight_version", "policy version being served",
                                value=snapshot["policy_version"])
        yield CounterMetricFamily("veri_policy_weight_reloads", "weight updates applied",
                                  value=snapshot["weight_updates"])
        yield CounterMetricFamily("veri_policy_engine_failures", "decode steps that failed their requests",
                                  value=snapshot["engine_failures"])
        yield GaugeMetricFamily("veri_policy_waiting_requests", "requests waiting for a place in the batch",
                                value=snapshot["waiting_requests"])
        yield GaugeMetricFamily("veri_policy_active_rows", "rows being decoded now", value=snapshot["active_rows"])


class PolicyMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.routes = RouteMetrics("veri_policy", self.registry)
        self.prompt_tokens = Counter("veri_policy_prompt_tokens", "prompt tokens of answered completions",
                                     registry=self.registry)
        self.generated_tokens = Counter("veri_policy_generated_tokens", "tokens sampled for answered completions",
                                        registry=self.registry)

    def watch(self, batcher: Batcher) -> None:
        self.registry.register(BatcherCollector(batcher))

    def completion_served(self, response: CompletionResponse) -> None:
        self.prompt_tokens.inc(response.usage.prompt_tokens)
        self.generated_tokens.inc(response.usage.completion_tokens)


def policy_metrics(request: Request) -> PolicyMetrics:
    return request.app.state.metrics


router = APIRouter()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body, content_type = metrics_payload(policy_metrics(request).registry)
    return Response(body, media_type=content_type)
