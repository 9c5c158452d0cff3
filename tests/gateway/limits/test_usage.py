"""Reading a scope's quota usage, against both limiters (in-process and Redis)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.domain.limits import periods
from gateway.domain.limits.memory import InProcessLimiter, wall_clock_us
from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.limits.types import Limiter, Limits, Scope
from tests.gateway.limits.conftest import MakeLimiter

pytestmark = pytest.mark.asyncio(loop_scope="session")

DEPT = Scope("dept:usage", Limits(tokens_per_day=10_000), "department usage")
KEY = Scope("key:usage", Limits(), "key usage")


async def test_a_scope_never_seen_has_used_nothing(limiter: Limiter) -> None:
    before = wall_clock_us()
    usage = await limiter.usage(DEPT)
    assert (usage.day_used, usage.month_used) == (0, 0)
    assert abs(usage.now_us - before) < 5 * periods.US_PER_S  # the store's clock, in us


async def test_admissions_count_until_settled_then_the_settled_count(limiter: Limiter) -> None:
    first = await limiter.admit([DEPT, KEY], 500)
    second = await limiter.admit([DEPT], 300)
    usage = await limiter.usage(DEPT)
    assert (usage.day_used, usage.month_used) == (800, 800)  # reservations, while pending
    assert (await limiter.usage(KEY)).day_used == 500  # each scope its own counters
    await limiter.settle(first, 120)  # the settled count replaces the reservation
    assert (await limiter.usage(DEPT)).day_used == 420
    assert (await limiter.usage(KEY)).month_used == 120
    await limiter.settle(second, 0)
    await limiter.settle(second, 0)  # idempotent: read back the same
    settled = await limiter.usage(DEPT)
    assert (settled.day_used, settled.month_used) == (120, 120)


async def test_reading_changes_nothing(limiter: Limiter) -> None:
    await limiter.admit([DEPT], 9_000)
    for _ in range(3):
        assert (await limiter.usage(DEPT)).day_used == 9_000
    await limiter.admit([DEPT], 1_000)  # exactly the daily quota: reading took no room


async def test_a_past_day_and_month_read_as_nothing_used(
    make_limiter: MakeLimiter, prefix: str, redis_client: Redis
) -> None:
    """The counters of a day (month) that has ended read 0, like admission rolls them over."""
    clock = [wall_clock_us()]
    limiter = make_limiter()
    if isinstance(limiter, InProcessLimiter):  # its clock can be moved: a day later
        limiter = InProcessLimiter(clock=lambda: clock[0])
    await limiter.admit([DEPT], 700)
    assert (await limiter.usage(DEPT)).day_used == 700
    if isinstance(limiter, RedisLimiter):
        # Redis's clock cannot be moved: move the counters' period back instead.
        quota = f"{prefix}:{DEPT.key}:quota"
        day, month = (int(v) for v in await redis_client.hmget(quota, ["d", "m"]))
        await redis_client.hset(quota, "d", day - 1)
        assert (await limiter.usage(DEPT)).day_used == 0
        assert (await limiter.usage(DEPT)).month_used == 700
        await redis_client.hset(quota, "m", month - 1)
    else:
        clock[0] = (periods.day_of(clock[0]) + 1) * periods.US_PER_DAY  # next midnight
        same_month = periods.month_of(clock[0]) == periods.month_of(clock[0] - 1)
        assert (await limiter.usage(DEPT)).day_used == 0
        assert (await limiter.usage(DEPT)).month_used == (700 if same_month else 0)
        clock[0] += 32 * periods.US_PER_DAY
    assert (await limiter.usage(DEPT)).month_used == 0
    await limiter.admit([DEPT], 10_000)  # the whole day's quota again: admission agrees
