"""Counters stay whole numbers, whatever a caller or an older version left behind.

Redis runs the limits in Lua, whose numbers are doubles; Redis writes one past 2**53 as a
float ("1e+22"), and its integer commands refuse such a value on every later call. These
tests hold both limiters to whole counts and the Redis one to repairing a float it finds.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.domain.limits import lua
from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.limits.types import MAX_TOKENS, Limiter, LimitExceeded, Limits, Scope

pytestmark = pytest.mark.asyncio(loop_scope="session")


def dept(**limits: int | None) -> Scope:
    return Scope("dept:research", Limits(**limits), "department research")


def key(**limits: int | None) -> Scope:
    return Scope("key:ci", Limits(**limits), "key ci")


async def quota_hash(client: Redis, prefix: str, scope: Scope) -> dict[str, str]:
    raw = await client.hgetall(f"{prefix}:{scope.key}:quota")  # type: ignore[misc]
    return {k.decode(): v.decode() for k, v in raw.items()}


async def assert_whole(limiter: Limiter, client: Redis, prefix: str, scope: Scope) -> None:
    """The Redis counters are digit strings (the in-process ones are Python ints)."""
    if isinstance(limiter, RedisLimiter):
        counters = await quota_hash(client, prefix, scope)
        assert counters and all(v.isdigit() for v in counters.values()), counters


@pytest.mark.parametrize("tokens", [2**53, 10**20, 1e20, 2.0, True, "5"])
async def test_a_reservation_must_be_a_whole_number_below_2_53(
    limiter: Limiter, tokens: Any
) -> None:
    with pytest.raises(ValueError, match="tokens must be"):
        await limiter.admit([dept(tokens_per_day=1000)], tokens)
    # Nothing was recorded: the whole quota is still there.
    await limiter.admit([dept(tokens_per_day=1000)], 1000)


async def test_counters_saturate_as_whole_numbers(
    limiter: Limiter, redis_client: Redis, prefix: str
) -> None:
    """Reservations of the largest count: a sum past 10**17, which Redis would write as
    a float, stays whole, and settling them gives the quota back."""
    unlimited = dept()
    reservations = [await limiter.admit([unlimited], MAX_TOKENS) for _ in range(12)]
    await assert_whole(limiter, redis_client, prefix, unlimited)
    with pytest.raises(LimitExceeded) as full:
        await limiter.admit([dept(tokens_per_day=10)], 1)
    assert full.value.reason == "tokens_per_day"
    for reservation in reservations:
        await limiter.settle(reservation, 0)
    await assert_whole(limiter, redis_client, prefix, unlimited)
    await limiter.admit([dept(tokens_per_day=10)], 10)


async def test_a_usage_past_2_53_is_clamped_and_a_bad_one_keeps_the_reservation(
    limiter: Limiter, redis_client: Redis, prefix: str
) -> None:
    scope = dept(tokens_per_month=1000)
    huge = await limiter.admit([scope], 100)
    await limiter.settle(huge, 10**30)  # a worker's absurd usage: counted, not fatal
    await assert_whole(limiter, redis_client, prefix, scope)
    with pytest.raises(LimitExceeded):
        await limiter.admit([scope], 1)

    other = key(tokens_per_day=1000)
    kept = await limiter.admit([other], 600)
    await limiter.settle(kept, 1.5)  # type: ignore[arg-type]
    with pytest.raises(LimitExceeded):  # the 600 stay counted: 600 + 401 > 1000
        await limiter.admit([other], 401)
    await limiter.admit([other], 400)


@pytest.mark.parametrize("tokens", ["1e20", "100000000000000000000", "2.5", "-1", "", "0x10"])
async def test_the_admit_script_refuses_a_count_that_is_not_whole(
    redis_client: Redis, prefix: str, tokens: str
) -> None:
    """The script's own guard, for any client of it: refused before a key is written."""
    keys = [f"{prefix}:dept:x:{kind}" for kind in ("rpm", "tpm", "tpmsum", "conc", "quota")]
    args = ["id", tokens, 1_000_000, 60_000_000, lua.QUOTA_TTL_MS, -1, -1, -1, -1, -1]
    with pytest.raises(ResponseError, match="tokens must be a whole number below 2"):
        await redis_client.eval(lua.ADMIT, len(keys), *keys, *args)  # type: ignore[misc]
    assert [k async for k in redis_client.scan_iter(f"{prefix}:*")] == []


async def test_a_float_left_in_the_counters_is_repaired(redis_client: Redis, prefix: str) -> None:
    """What an older version wrote after a huge reservation: settlement used to fail on it
    (HINCRBY: "hash value is not an integer") for the rest of the month."""
    limiter = RedisLimiter(redis_client, prefix=prefix)
    scope = dept(tokens_per_minute=1000)
    reservation = await limiter.admit([scope], 100)
    base = f"{prefix}:{scope.key}"
    await redis_client.hset(f"{base}:quota", mapping={"du": "1e+22", "mu": "1e+22"})  # type: ignore[misc]
    await redis_client.set(f"{base}:tpmsum", "1e+22", keepttl=True)
    await limiter.settle(reservation, 10)
    counters = await quota_hash(redis_client, prefix, scope)
    assert counters["du"] == counters["mu"] == str(MAX_TOKENS - 90)
    assert (await redis_client.get(f"{base}:tpmsum")) == str(MAX_TOKENS - 90).encode()
    # Admission reads the saturated window as full, and writes whole numbers back.
    with pytest.raises(LimitExceeded):
        await limiter.admit([scope], 1)


async def test_a_settlement_that_fails_has_freed_every_slot_first(
    redis_client: Redis, prefix: str
) -> None:
    limiter = RedisLimiter(redis_client, prefix=prefix)
    scopes = [dept(concurrent_requests=1, tokens_per_minute=1000), key(concurrent_requests=1)]
    reservation = await limiter.admit(scopes, 100)
    # A damaged key in the first scope: the settlement cannot adjust its tokens.
    tpmsum = f"{prefix}:{scopes[0].key}:tpmsum"
    await redis_client.delete(tpmsum)
    await redis_client.hset(tpmsum, "x", "1")  # type: ignore[misc]
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await limiter.settle(reservation, 10)
    for scope in scopes:
        assert await redis_client.zcard(f"{prefix}:{scope.key}:conc") == 0
    await redis_client.delete(tpmsum)
    await limiter.admit(scopes, 100)  # both slots are free again
