"""One gateway replica's limiter in its own OS process (started with spawn by the tests)."""

from __future__ import annotations

import asyncio
from threading import Barrier  # a Manager().Barrier proxy, shared by the processes

from redis.asyncio import Redis

from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.limits.types import LimitExceeded, Limits, Reservation, Scope


async def _burst(limiter: RedisLimiter, scope: Scope, count: int, tokens: int) -> list[Reservation]:
    async def one() -> Reservation | None:
        try:
            return await limiter.admit([scope], tokens)
        except LimitExceeded:
            return None

    results = await asyncio.gather(*(one() for _ in range(count)))
    return [r for r in results if r is not None]


async def _run(
    redis_url: str,
    prefix: str,
    limits: Limits,
    count: int,
    tokens: int,
    settle_to: int | None,
    barrier: Barrier,
) -> list[int]:
    client = Redis.from_url(redis_url, max_connections=200)
    try:
        # A loaded test machine opening 100 connections at once is slow, not down.
        limiter = RedisLimiter(client, prefix=prefix, timeout_s=30)
        scope = Scope("dept:shared", limits)
        await client.ping()  # connect before the start line, so the bursts overlap
        barrier.wait()
        first = await _burst(limiter, scope, count, tokens)
        if settle_to is None:
            return [len(first)]
        barrier.wait()  # settling now would make room for the other replica's first burst
        await asyncio.gather(*(limiter.settle(r, settle_to) for r in first))
        barrier.wait()  # both replicas have settled before the second burst
        second = await _burst(limiter, scope, count, tokens)
        return [len(first), len(second)]
    finally:
        await client.aclose()


def replica(
    redis_url: str,
    prefix: str,
    limits: Limits,
    count: int,
    tokens: int,
    settle_to: int | None,
    barrier: Barrier,
) -> list[int]:
    """How many of ``count`` simultaneous admissions got in (then, after settling, again)."""
    return asyncio.run(_run(redis_url, prefix, limits, count, tokens, settle_to, barrier))
