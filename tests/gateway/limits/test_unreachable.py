"""Redis down: fail closed by default, fail open only when configured, never count locally."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from gateway.domain.limits import build_limiter
from gateway.domain.limits.memory import InProcessLimiter
from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.limits.types import LimiterUnavailable, Limits, Reservation, Scope
from gateway.domain.proxy.metrics import GatewayMetrics
from gateway.domain.workers.pool import WorkerPool
from gateway.settings import Settings
from tests.gateway.traffic.processes import link_to

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCOPE = Scope("dept:down", Limits(requests_per_minute=1))


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def down() -> AsyncIterator[Redis]:
    client = Redis.from_url(f"redis://127.0.0.1:{closed_port()}/0")
    yield client
    await client.aclose()


async def test_fails_closed_by_default(down: Redis) -> None:
    limiter = RedisLimiter(down)
    with pytest.raises(LimiterUnavailable, match="unreachable") as caught:
        await limiter.admit([SCOPE], 10)
    assert isinstance(caught.value, ConnectionError)  # the gateway's 503 handler


async def test_fails_open_when_configured_and_enforces_nothing(down: Redis) -> None:
    limiter = RedisLimiter(down, fail_open=True)
    with capture_logs() as logs:
        for _ in range(3):  # a limit of 1 would refuse the second, were anything counted
            reservation = await limiter.admit([SCOPE], 10)
            assert not reservation.enforced and reservation.headers == {}
            await limiter.settle(reservation, 5)
    warned = [e for e in logs if e["event"] == "limits_not_enforced"]
    assert len(warned) == 3 and warned[0]["log_level"] == "warning"


async def test_settling_with_redis_down_does_not_raise(down: Redis) -> None:
    reservation = Reservation("r1", (SCOPE,), 10, {}, admitted_at_us=1)
    limiter = RedisLimiter(down)
    await limiter.settle(reservation, 5)
    assert len(limiter.unsettled) == 1  # kept for a retry, not dropped
    with capture_logs() as logs:
        await limiter.close()
    assert [e["count"] for e in logs if e["event"] == "limits_unsettled_at_shutdown"] == [1]


async def test_a_settlement_redis_missed_is_made_once_it_is_back(
    redis_url: str, prefix: str
) -> None:
    """Cut Redis between admission and settlement: the quota must end at what was used,
    not at what was reserved, and the slot must be free, once Redis is reachable again."""
    scope = Scope("dept:cut", Limits(concurrent_requests=1, tokens_per_day=1000))
    with link_to(redis_url) as (link, through):
        client = Redis.from_url(through)
        limiter = RedisLimiter(client, prefix=prefix, timeout_s=0.5)
        limiter.unsettled.interval = 0.05
        try:
            reservation = await limiter.admit([scope], 400)
            link.cut()
            await limiter.settle(reservation, 25)
            assert limiter.pending_settlements == 1
            assert b"enclave_gateway_limits_unsettled 1.0" in GatewayMetrics().render(
                WorkerPool([], "t", interval=1), 0, 0, limiter.pending_settlements
            )
            await asyncio.sleep(0.3)  # retries meanwhile fail and keep it
            assert len(limiter.unsettled) == 1
            link.restore()
            for _ in range(100):
                if not limiter.unsettled:
                    break
                await asyncio.sleep(0.05)
            assert limiter.pending_settlements == 0
            quota = await client.hgetall(f"{prefix}:{scope.key}:quota")
            assert (quota[b"du"], quota[b"mu"]) == (b"25", b"25")
            assert await client.zcard(f"{prefix}:{scope.key}:conc") == 0
            await limiter.admit([scope], 400)  # the slot is free again
        finally:
            await limiter.close()
            await client.aclose()


async def test_a_redis_that_hangs_counts_as_down() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = Redis.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        with pytest.raises(LimiterUnavailable):
            await RedisLimiter(client, timeout_s=0.3).admit([SCOPE], 1)
    finally:
        await client.aclose()
        server.close()


async def test_build_limiter_picks_by_redis_and_reads_fail_open(down: Redis) -> None:
    assert isinstance(build_limiter(Settings(), None), InProcessLimiter)
    with pytest.raises(LimiterUnavailable):
        await build_limiter(Settings(), down).admit([SCOPE], 1)
    reservation = await build_limiter(Settings(limits_fail_open=True), down).admit([SCOPE], 1)
    assert not reservation.enforced
