"""The capture proxy's Prometheus metrics and its `GET /metrics` route.

    veri_proxy_requests_in_flight{route,protocol}          requests being served (summed over workers)
    veri_proxy_requests_total{route,protocol,status}       requests answered
    veri_proxy_request_seconds{route,protocol}             request -> last byte of the reply
    veri_proxy_spans_total{protocol,prompt_source}         spans recorded (bridged / full_render)
    veri_proxy_spans_flagged_total{rule}                   spans that already carry a rule's cause
                                                           (logprobs_absent); the trainer's verdicts
                                                           are veri_trainer_rollout_rules_total
    veri_proxy_refusals_total{reason,status}               requests refused, by error (invalid_api_key,
                                                           session_closed, policy_unavailable, ...)
    veri_proxy_policy_call_seconds{replica,outcome}        one policy /v1/completions call
    veri_proxy_policy_version                              policy version of the last span recorded

`/metrics` sits behind the control token, like /control: sandboxes reach this port for their rollout
routes and must not read it. Labels are route templates, protocols, replica indexes and error names:
never a rollout id or key. With `--workers N` every worker writes to the per-start multiprocess
folder and any worker's `/metrics` answers the sum (infra/metrics.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from veri.core.records import PromptSource, Protocol, Span
from veri.infra.metrics import LATENCY_BUCKETS, RouteMetrics
from veri.services.proxy.errors import InvalidRequest, PolicyAborted, PolicyUnavailable, ProxyError
from veri.services.proxy.rollout_routes import BY_TEMPLATE

# Rules whose cause a single span shows when it is recorded; the rest need the whole rollout.
SPAN_RULES = ("logprobs_absent",)


def route_protocol(route: str) -> tuple[str]:
    """The `protocol` label of a route template: a rollout route's declared one (`rollout_routes.py`)."""
    if route in BY_TEMPLATE:
        return (str(BY_TEMPLATE[route].protocol),)
    return ("control" if route.startswith("/control") else "none",)


def error_name(error: ProxyError) -> str:
    """InvalidApiKey -> invalid_api_key: the class tree in services/proxy/errors.py bounds the label's values."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()


class ProxyMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.routes = RouteMetrics("veri_proxy", self.registry, extra_labels=("protocol",), describe=route_protocol)
        self.spans = Counter("veri_proxy_spans", "spans recorded", ("protocol", "prompt_source"),
                             registry=self.registry)
        self.flagged = Counter("veri_proxy_spans_flagged", "spans recorded that carry a rule's cause", ("rule",),
                               registry=self.registry)
        self.refusals = Counter("veri_proxy_refusals", "requests refused, by error", ("reason", "status"),
                                registry=self.registry)
        self.policy_call = Histogram("veri_proxy_policy_call_seconds", "one call to the policy's /v1/completions",
                                     ("replica", "outcome"), registry=self.registry, buckets=LATENCY_BUCKETS)
        self.policy_version = Gauge("veri_proxy_policy_version", "policy version of the last span recorded",
                                    registry=self.registry, multiprocess_mode="mostrecent")
        for protocol in Protocol:
            for source in PromptSource:
                self.spans.labels(protocol.value, source.value)  # zeros shown before the first span
        for rule in SPAN_RULES:
            self.flagged.labels(rule)

    def span_recorded(self, span: Span) -> None:
        self.spans.labels(span.protocol.value, span.prompt_source.value).inc()
        if span.logprobs_absent:
            self.flagged.labels("logprobs_absent").inc()
        self.policy_version.set(span.policy_version)

    def refused(self, error: ProxyError) -> None:
        self.refusals.labels(error_name(error), str(error.status_code)).inc()

    @contextmanager
    def policy_call_timer(self, replica: int) -> Iterator[None]:
        """Times the call; the outcome says how it ended (ok, refused: a 4xx, aborted, unavailable)."""
        started, outcome = time.perf_counter(), "ok"
        try:
            yield
        except PolicyAborted:
            outcome = "aborted"
            raise
        except PolicyUnavailable:
            outcome = "unavailable"
            raise
        except InvalidRequest:
            outcome = "refused"
            raise
        finally:
            self.policy_call.labels(str(replica), outcome).observe(time.perf_counter() - started)
