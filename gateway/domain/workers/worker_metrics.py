"""What a worker's own /metrics says about its load, read from Prometheus text.

The names are the worker's (inference/server/metrics.py). Each is summed over its label
sets: a worker serves one model, but its token counters are split by tenant. A family the
text lacks (a worker still loading has no engine gauges) reads as None, not as 0; one it
declares with no series yet (no tenant has been served) reads as 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "inference"
# Sample name -> field of WorkerSample (counters carry Prometheus's "_total" suffix).
SAMPLES = {
    f"{PREFIX}_requests_waiting": "requests_waiting",
    f"{PREFIX}_requests_running": "requests_running",
    f"{PREFIX}_kv_cache_usage_ratio": "kv_cache_usage",
    f"{PREFIX}_generation_tokens_total": "generation_tokens",
    f"{PREFIX}_prefix_cache_queries_total": "prefix_cache_queries",
    f"{PREFIX}_prefix_cache_hits_total": "prefix_cache_hits",
}


@dataclass(frozen=True, slots=True)
class WorkerSample:
    requests_waiting: float | None = None
    requests_running: float | None = None
    kv_cache_usage: float | None = None  # 0 to 1
    generation_tokens: float | None = None  # since the worker started
    prefix_cache_queries: float | None = None  # prompt tokens looked up, since start
    prefix_cache_hits: float | None = None  # of which found

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Hits per prompt token looked up since the worker started (None before any)."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


def parse(text: str) -> WorkerSample:
    """The load figures in ``text``; raises ValueError on text that is not Prometheus's."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        # A labelled counter is declared before its first series: present, so 0 (a fresh
        # worker has generated nothing yet), unlike a family the text lacks.
        declared = SAMPLES.get(family.name) or SAMPLES.get(f"{family.name}_total")
        if declared is not None:
            sums.setdefault(declared, 0.0)
        for sample in family.samples:
            field = SAMPLES.get(sample.name)
            if field is not None:
                sums[field] = sums.get(field, 0.0) + float(sample.value)
    return WorkerSample(**sums)
