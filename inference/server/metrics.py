"""Prometheus metrics of one worker, in a registry of its own (never the global one).

Engine state (queue sizes, KV cache, prefix cache, preemptions) is read at scrape time by
a collector, so it is always current and costs nothing between scrapes; per-request
numbers are recorded when a request ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inference.engine.async_engine import RequestTiming

PREFIX = "inference"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
_TOKEN_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
    0.75, 1.0, 2.5,
)  # fmt: skip


class _EngineCollector(Collector):
    """Reads the scheduler's counters when Prometheus scrapes."""

    def __init__(self, model: str, get_engine: Callable[[], Any | None]) -> None:
        self._model = model
        self._get_engine = get_engine

    def collect(self) -> Iterator[Metric]:
        engine = self._get_engine()
        if engine is None:  # still loading
            return
        scheduler = engine.scheduler
        bm = scheduler.block_manager
        gauges: tuple[tuple[str, str, float], ...] = (
            ("requests_running", "Sequences being generated.", scheduler.num_running),
            ("requests_waiting", "Sequences waiting to be scheduled.", scheduler.num_waiting),
            (
                "kv_cache_usage_ratio",
                "Fraction of KV cache blocks in use (0 to 1).",
                scheduler.block_manager.usage,
            ),
            ("kv_cache_capacity_tokens", "Tokens the KV cache holds.", engine.kv_capacity_tokens),
            ("prefix_cache_pinned_blocks", "KV blocks held by pinned prefixes (never evicted).",
             bm.num_pinned_blocks),
            ("prefix_cache_pinned_prefixes", "Prefixes pinned (POST /v1/internal/prefixes).",
             len(bm.pins)),
            ("prefix_cache_max_pinned_blocks", "The cap on pinned blocks (--max-pinned-fraction).",
             bm.max_pinned_blocks),
        )  # fmt: skip
        spec = getattr(engine, "spec", None)
        if spec is not None:
            gauges += (
                ("spec_decode_acceptance_rate",
                 "Proposed tokens accepted by the target, over those proposed (0 to 1).",
                 spec.stats.acceptance_rate),
                ("spec_decode_mean_accepted_length",
                 "Tokens a verify step emits on average (accepted proposals plus one).",
                 spec.stats.mean_accepted_length),
            )  # fmt: skip
        for name, doc, value in gauges:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
            family.add_metric([self._model], float(value))
            yield family
        counters: tuple[tuple[str, str, float], ...] = (
            ("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
             scheduler.prefix_cache_queries),
            ("prefix_cache_hits", "Prompt tokens found in the prefix cache.",
             scheduler.prefix_cache_hits),
            ("preemptions", "Sequences preempted to free KV cache.", scheduler.num_preemptions),
        )  # fmt: skip
        if spec is not None:
            counters += (
                ("spec_decode_proposed_tokens", "Tokens proposed for verification.",
                 spec.stats.num_proposed_tokens),
                ("spec_decode_accepted_tokens", "Proposed tokens the target accepted.",
                 spec.stats.num_accepted_tokens),
                ("spec_decode_verify_steps", "Sequence-steps that verified proposed tokens.",
                 spec.stats.num_verify_steps),
            )  # fmt: skip
        for name, doc, value in counters:
            counter = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
            counter.add_metric([self._model], float(value))
            yield counter


class WorkerMetrics:
    def __init__(self, model: str, get_engine: Callable[[], Any | None]) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EngineCollector(model, get_engine))
        by_tenant = ["model", "tenant"]
        reg = self.registry
        self.prompt_tokens = Counter(
            f"{PREFIX}_prompt_tokens", "Prompt tokens processed.", by_tenant, registry=reg
        )
        self.generation_tokens = Counter(
            f"{PREFIX}_generation_tokens", "Tokens generated.", by_tenant, registry=reg
        )
        self.requests = Counter(
            f"{PREFIX}_requests",
            "Requests that ended, by finish reason (abort: client gone or server cut off).",
            [*by_tenant, "finish_reason"],
            registry=reg,
        )
        self.rejected = Counter(
            f"{PREFIX}_requests_rejected",
            "Requests refused before reaching the engine, by HTTP status.",
            ["model", "status"],
            registry=reg,
        )
        self.time_to_first_token = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "Arrival to first generated token.",
            by_tenant,
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.inter_token_latency = Histogram(
            f"{PREFIX}_inter_token_latency_seconds",
            "Time between consecutive tokens of one sequence.",
            ["model"],
            buckets=_TOKEN_LATENCY_BUCKETS,
            registry=reg,
        )
        self.end_to_end_latency = Histogram(
            f"{PREFIX}_e2e_request_latency_seconds",
            "Arrival to last token.",
            by_tenant,
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.queue_time = Histogram(
            f"{PREFIX}_request_queue_time_seconds",
            "Arrival to the start of the step that produced the first token.",
            by_tenant,
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )

    def observe_request(self, timing: RequestTiming) -> None:
        labels = (self.model, timing.tenant)
        self.prompt_tokens.labels(*labels).inc(timing.num_prompt_tokens)
        self.generation_tokens.labels(*labels).inc(timing.num_generated_tokens)
        self.requests.labels(*labels, timing.finish_reason).inc()
        self.end_to_end_latency.labels(*labels).observe(timing.end_to_end)
        if timing.time_to_first_token is not None:
            self.time_to_first_token.labels(*labels).observe(timing.time_to_first_token)
        if timing.queue_time is not None:
            self.queue_time.labels(*labels).observe(timing.queue_time)
        itl = self.inter_token_latency.labels(self.model)
        for seconds in timing.inter_token_latencies:
            itl.observe(seconds)

    def observe_rejection(self, status: int) -> None:
        self.rejected.labels(self.model, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
