"""The pool against real HTTP workers on loopback: health, models, picking, leases."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from gateway.domain.workers.pool import NoUpstream, Upstream, WorkerPool
from tests.gateway.workers.conftest import TOKEN, StubWorker

# The pool's health loop runs on the loop its fixture started it on: the session's.
pytestmark = pytest.mark.asyncio(loop_scope="session")
INTERVAL = 0.1


@pytest.fixture
async def pool(stubs: list[StubWorker]) -> AsyncIterator[WorkerPool]:
    workers = WorkerPool([s.url for s in stubs], TOKEN, interval=INTERVAL, affinity_slack=2)
    await workers.start()
    yield workers
    await workers.close()


def by_url(pool: WorkerPool, stub: StubWorker) -> Upstream:
    return next(u for u in pool.upstreams if u.url == stub.url)


async def wait_until(condition: object, timeout: float) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, "condition did not hold in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_start_knows_every_model_and_sends_the_token(
    pool: WorkerPool, stubs: list[StubWorker]
) -> None:
    assert pool.models() == ["other", "tiny"]
    assert all(u.healthy and not u.last_error for u in pool.upstreams)
    assert all(s.authorizations and set(s.authorizations) == {f"Bearer {TOKEN}"} for s in stubs)


async def test_a_wrong_token_makes_the_worker_unhealthy(stubs: list[StubWorker]) -> None:
    workers = WorkerPool([stubs[0].url], "not-the-token", interval=INTERVAL)
    await workers.start()
    try:
        (upstream,) = workers.upstreams
        assert not upstream.healthy and "401" in upstream.last_error
        assert stubs[0].authorizations[-1] == "Bearer not-the-token"
    finally:
        await workers.close()


async def test_pick_routes_by_affinity_and_spreads_keys(
    pool: WorkerPool, stubs: list[StubWorker]
) -> None:
    tiny = {stubs[0].url, stubs[1].url}
    key = "You are the quality assistant. The manual says..."
    assert len({pool.pick("tiny", key).url for _ in range(20)}) == 1
    assert pool.pick("tiny", key).url in tiny
    spread = Counter(pool.pick("tiny", f"system prompt {i}").url for i in range(50))
    assert set(spread) == tiny and min(spread.values()) >= 10, spread
    assert pool.pick("other", key).url == stubs[2].url


async def test_slack_and_least_loaded(pool: WorkerPool, stubs: list[StubWorker]) -> None:
    key = "a shared system prompt"
    preferred = pool.pick("tiny", key)
    other = by_url(pool, stubs[1] if preferred.url == stubs[0].url else stubs[0])
    with pool.lease(preferred), pool.lease(preferred):
        assert preferred.in_flight == 2
        assert pool.pick("tiny", key) is preferred  # 2 <= 0 + slack 2
        assert pool.pick("tiny", None) is other  # no affinity: least loaded
        with pool.lease(preferred):
            assert pool.pick("tiny", key) is other  # 3 > 0 + 2: least loaded wins
    assert preferred.in_flight == 0
    # Equal load without affinity: round-robin over both.
    assert {pool.pick("tiny", None).url for _ in range(4)} == {stubs[0].url, stubs[1].url}


async def test_unknown_model_and_all_down(pool: WorkerPool, stubs: list[StubWorker]) -> None:
    with pytest.raises(NoUpstream) as unknown:
        pool.pick("no-such-model", None)
    assert unknown.value.known is False and unknown.value.model == "no-such-model"
    for upstream in pool.upstreams:
        pool.mark_failed(upstream, "connect error")
    with pytest.raises(NoUpstream) as down:
        pool.pick("tiny", "key")
    assert down.value.known is True
    assert pool.models() == []
    # A passive failure lasts only until the next good check.
    await wait_until(lambda: pool.models() == ["other", "tiny"], timeout=5 * INTERVAL)


async def test_before_any_worker_answered_nothing_is_unknown() -> None:
    # All workers down at gateway start: an outage (503), not a wrong model name (404).
    workers = WorkerPool(["http://127.0.0.1:9"], TOKEN, interval=INTERVAL)
    await workers.start()
    try:
        with pytest.raises(NoUpstream) as down:
            workers.pick("tiny", None)
        assert down.value.known is True
        assert "unreachable" in workers.upstreams[0].last_error
    finally:
        await workers.close()


async def test_stopped_worker_is_taken_out_and_put_back(
    pool: WorkerPool, stubs: list[StubWorker]
) -> None:
    stub = stubs[0]
    upstream = by_url(pool, stub)
    stub.stop()
    took = await wait_until(lambda: not upstream.healthy, timeout=2 * INTERVAL + 0.5)
    assert took <= 2 * INTERVAL + 0.2, took
    assert "unreachable" in upstream.last_error
    assert {pool.pick("tiny", f"key {i}").url for i in range(20)} == {stubs[1].url}
    stub.start()
    await wait_until(lambda: upstream.healthy, timeout=2 * INTERVAL + 0.5)
    assert upstream.last_error == ""
    assert {pool.pick("tiny", f"key {i}").url for i in range(50)} == {s.url for s in stubs[:2]}


async def test_a_draining_worker_is_taken_out(pool: WorkerPool, stubs: list[StubWorker]) -> None:
    stubs[2].ready_status = 503
    upstream = by_url(pool, stubs[2])
    await wait_until(lambda: not upstream.healthy, timeout=2 * INTERVAL + 0.5)
    assert "/ready answered 503" in upstream.last_error
    with pytest.raises(NoUpstream) as down:
        pool.pick("other", None)
    assert down.value.known is True  # still known: it served "other" before


async def test_each_models_context_length_comes_from_its_card() -> None:
    """What a worker's /v1/models says a model's max_model_len is; a card without one (or
    with a 0, as a worker still loading says) leaves it unknown."""
    reporting, silent = StubWorker(["tiny"], 512), StubWorker(["tiny"], None)
    loading = StubWorker(["tiny", "other"], 0)
    for stub in (reporting, silent, loading):
        stub.start()
    workers = WorkerPool([reporting.url, silent.url, loading.url], TOKEN, interval=INTERVAL)
    try:
        await workers.start()
        assert by_url(workers, reporting).max_model_len == {"tiny": 512}
        assert by_url(workers, silent).max_model_len == {}
        assert by_url(workers, loading).max_model_len == {}
        reporting.max_model_len = 1024  # a restart with a longer context: the next check
        await wait_until(lambda: by_url(workers, reporting).max_model_len == {"tiny": 1024}, 5)
    finally:
        await workers.close()
        for stub in (reporting, silent, loading):
            stub.stop()


async def test_a_worker_back_up_is_held_until_released_or_the_hold_runs_out(
    pool: WorkerPool, stubs: list[StubWorker]
) -> None:
    pool.hold_new_workers(0.5)
    stub = stubs[0]
    upstream = by_url(pool, stub)
    stub.stop()
    await wait_until(lambda: not upstream.healthy, timeout=2 * INTERVAL + 0.5)
    stub.start()
    await wait_until(lambda: upstream.healthy, timeout=2 * INTERVAL + 0.5)
    # Healthy but held: the warmer may pick it, the router may not.
    assert upstream.warming and not upstream.routable
    assert {pool.pick("tiny", f"key {i}").url for i in range(20)} == {stubs[1].url}
    assert pool.pick("tiny", "key", warming_too=True) in pool.upstreams
    pool.release(upstream)
    assert upstream.routable
    # Once more, without a release: the hold runs out by itself.
    stub.stop()
    await wait_until(lambda: not upstream.healthy, timeout=2 * INTERVAL + 0.5)
    stub.start()
    await wait_until(lambda: upstream.healthy, timeout=2 * INTERVAL + 0.5)
    assert upstream.warming
    took = await wait_until(lambda: upstream.routable, timeout=2)
    assert 0.2 < took <= 1.0, took
