"""Two gateway processes on one Redis share one exact limit."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from gateway.domain.limits.types import Limits
from tests.gateway.limits.replica import replica

TwoReplicas = Callable[[str, Limits, int, "int | None"], list[list[int]]]


@pytest.fixture(scope="module")
def two_replicas(redis_url: str) -> Iterator[TwoReplicas]:
    """Two spawned processes (started once for the module), each with its own Redis client."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(2, mp_context=context) as pool:
        barrier = manager.Barrier(2)

        def run(prefix: str, limits: Limits, tokens: int, settle_to: int | None) -> list[list[int]]:
            args = (redis_url, prefix, limits, 100, tokens, settle_to, barrier)
            futures = [pool.submit(replica, *args) for _ in range(2)]
            return [f.result(timeout=60) for f in futures]

        yield run


def test_requests_per_minute_is_exact_across_processes(
    two_replicas: TwoReplicas, prefix: str
) -> None:
    # Counted per process, each would admit 60; sharing one window, 60 of the 200 get in.
    counts = two_replicas(prefix, Limits(requests_per_minute=60), 0, None)
    assert sum(c[0] for c in counts) == 60


def test_tokens_per_minute_reserve_and_settle_across_processes(
    two_replicas: TwoReplicas, prefix: str
) -> None:
    """500 reserved each: 20 fit in 10,000. Each then uses 250: 5,000 come back, 10 more fit."""
    counts = two_replicas(prefix, Limits(tokens_per_minute=10_000), 500, 250)
    assert sum(c[0] for c in counts) == 20
    assert sum(c[1] for c in counts) == 10
