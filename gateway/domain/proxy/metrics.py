"""The gateway's Prometheus metrics: one registry per app, served at /metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.domain.proxy.sse import Usage

if TYPE_CHECKING:
    from gateway.domain.workers.pool import WorkerPool

PREFIX = "enclave_gateway"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One API request as the metrics count it."""

    endpoint: str
    status: int
    reason: str  # why it was refused or failed; "" when it succeeded
    usage: Usage | None  # None: no tokens to count
    department_slug: str  # "" without a department
    duration_s: float  # from the request to its last byte


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self.requests = Counter(
            f"{PREFIX}_requests", "API requests by outcome.", ["endpoint", "status"], registry=reg
        )
        self.refusals = Counter(
            f"{PREFIX}_refusals", "Requests refused or failed, by reason.", ["reason"], registry=reg
        )
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Time from the request to its last byte.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.settle_failures = Counter(
            f"{PREFIX}_settle_failures",
            "Settlements the limiter raised on (the request was still audited).",
            registry=reg,
        )
        self.tokens = Counter(
            f"{PREFIX}_tokens",
            "Tokens by department and kind.",
            ["department", "kind"],
            registry=reg,
        )
        self.constrained = Counter(
            f"{PREFIX}_constrained_requests",
            "Requests with a structured-output constraint (response_format or guided_*), by kind.",
            ["kind"],
            registry=reg,
        )
        self.tool_requests = Counter(
            f"{PREFIX}_tool_requests",
            "Chat requests offering tools, by tool_choice (auto, none, required, named).",
            ["tool_choice"],
            registry=reg,
        )
        self.upstream_healthy = Gauge(
            f"{PREFIX}_upstream_healthy",
            "1 while a worker passes its checks.",
            ["upstream"],
            registry=reg,
        )
        self.upstream_in_flight = Gauge(
            f"{PREFIX}_upstream_in_flight",
            "Requests in flight per worker.",
            ["upstream"],
            registry=reg,
        )
        self.worker_restarts = Counter(
            f"{PREFIX}_worker_restarts",
            "Restarts of the worker the gateway supervises, by reason (crash, start_failed,"
            " admin).",
            ["reason"],
            registry=reg,
        )
        self.audit_pending = Gauge(
            f"{PREFIX}_audit_pending", "Audit records not yet written.", registry=reg
        )
        self.audit_spooled = Gauge(
            f"{PREFIX}_audit_spooled", "Audit records waiting in the spool file.", registry=reg
        )
        self.limits_unsettled = Gauge(
            f"{PREFIX}_limits_unsettled",
            "Settlements waiting for Redis to be reachable again.",
            registry=reg,
        )

    def observe(self, outcome: Outcome) -> None:
        self.requests.labels(outcome.endpoint, str(outcome.status)).inc()
        self.latency.labels(outcome.endpoint).observe(outcome.duration_s)
        if outcome.reason:
            self.refusals.labels(outcome.reason).inc()
        usage = outcome.usage
        if usage is not None:
            slug = outcome.department_slug or "none"
            self.tokens.labels(slug, "prompt").inc(usage.prompt_tokens)
            self.tokens.labels(slug, "cached").inc(usage.cached_tokens)
            self.tokens.labels(slug, "completion").inc(usage.completion_tokens)

    def render(
        self, pool: WorkerPool, audit_pending: int, audit_spooled: int, unsettled: int = 0
    ) -> bytes:
        # Cleared first: a worker a weight swap replaced leaves no stale series behind.
        self.upstream_healthy.clear()
        self.upstream_in_flight.clear()
        for upstream in pool.upstreams:
            self.upstream_healthy.labels(upstream.url).set(1 if upstream.healthy else 0)
            self.upstream_in_flight.labels(upstream.url).set(upstream.in_flight)
        self.audit_pending.set(audit_pending)
        self.audit_spooled.set(audit_spooled)
        self.limits_unsettled.set(unsettled)
        return generate_latest(self.registry)
