"""The limits' semantics, run against both limiters (in-process and Redis)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.domain.limits import periods
from gateway.domain.limits.memory import wall_clock_us
from gateway.domain.limits.types import Limiter, LimitExceeded, Limits, Scope
from tests.gateway.limits.conftest import MakeLimiter

pytestmark = pytest.mark.asyncio(loop_scope="session")


def dept(**limits: int | None) -> Scope:
    return Scope("dept:research", Limits(**limits), "department research")


def key(**limits: int | None) -> Scope:
    return Scope("key:ci", Limits(**limits), "key ci")


def seconds(duration: str) -> float:
    """Parse what format_duration writes (only the forms a minute window produces)."""
    if duration.endswith("ms"):
        return float(duration[:-2]) / 1000
    minutes, _, rest = duration.rpartition("m")
    return (float(minutes) * 60 if minutes else 0.0) + float(rest.rstrip("s"))


async def refusal(limiter: Limiter, scopes: list[Scope], tokens: int = 0) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as caught:
        await limiter.admit(scopes, tokens)
    return caught.value


async def test_requests_per_minute_counts_down_then_refuses(limiter: Limiter) -> None:
    scope = dept(requests_per_minute=5)
    remaining = [(await limiter.admit([scope], 0)).headers for _ in range(5)]
    assert [h["x-ratelimit-remaining-requests"] for h in remaining] == ["4", "3", "2", "1", "0"]
    assert {h["x-ratelimit-limit-requests"] for h in remaining} == {"5"}
    assert "x-ratelimit-limit-tokens" not in remaining[0]  # no token limit, no token headers
    refused = await refusal(limiter, [scope])
    assert refused.reason == "requests_per_minute" and refused.scope == "dept:research"
    # The oldest admission leaves the window a minute after it came in: nearly 60 s from now.
    assert 55 <= refused.retry_after <= 60
    assert refused.headers["retry-after"] == str(int(refused.retry_after))
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert str(refused) == refused.message
    assert refused.message.startswith("department research: 5 requests per minute reached")


async def test_reset_counts_from_the_oldest_admission(limiter: Limiter) -> None:
    """A sliding window: the room comes back when the oldest admission is a minute old."""
    scope = dept(requests_per_minute=2)
    await limiter.admit([scope], 0)
    await asyncio.sleep(0.4)
    second = await limiter.admit([scope], 0)
    reset = seconds(second.headers["x-ratelimit-reset-requests"])
    assert 59.0 <= reset <= 59.7  # from the first admission, 0.4 s older, not from now
    refused = await refusal(limiter, [scope])
    assert refused.retry_after == 60  # 59.6 s, rounded up


async def test_tokens_per_minute_reserve_then_settle_frees_exactly(limiter: Limiter) -> None:
    scope = dept(tokens_per_minute=1000)
    first = await limiter.admit([scope], 600)
    assert first.headers["x-ratelimit-remaining-tokens"] == "400"
    refused = await refusal(limiter, [scope], 600)
    assert refused.reason == "tokens_per_minute"
    assert refused.message.startswith("department research: 1000 tokens per minute reached")
    await limiter.settle(first, 100)  # 500 of the reservation were not used
    second = await limiter.admit([scope], 900)  # 100 + 900: exactly the limit
    assert second.headers["x-ratelimit-remaining-tokens"] == "0"
    assert (await refusal(limiter, [scope], 1)).reason == "tokens_per_minute"


async def test_a_reservation_over_the_limit_can_never_fit(limiter: Limiter) -> None:
    refused = await refusal(limiter, [dept(tokens_per_minute=1000)], 1001)
    assert refused.reason == "tokens_per_minute" and "can never be admitted" in refused.message
    assert "1001 tokens" in refused.message
    await limiter.admit([dept(tokens_per_minute=1000)], 1000)  # nothing was recorded


async def test_concurrency_slots_are_held_until_settled(limiter: Limiter) -> None:
    scope = key(concurrent_requests=2)
    one, _two = await limiter.admit([scope], 0), await limiter.admit([scope], 0)
    refused = await refusal(limiter, [scope])
    assert refused.reason == "concurrent_requests" and refused.scope == "key:ci"
    assert refused.retry_after == 1 and refused.headers["retry-after"] == "1"
    assert refused.message == "key ci: 2 concurrent requests reached; retry in 1 s"
    await limiter.settle(one, 0)
    await limiter.settle(one, 0)  # twice frees one slot, not two
    await limiter.admit([scope], 0)
    assert (await refusal(limiter, [scope])).reason == "concurrent_requests"


async def test_a_crashed_gateways_slots_end_with_their_lease(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(lease_s=0.3)
    scope = key(concurrent_requests=1)
    await limiter.admit([scope], 0)  # never settled
    await refusal(limiter, [scope])
    await asyncio.sleep(0.4)
    await limiter.admit([scope], 0)


async def test_daily_quota_and_idempotent_settlement(limiter: Limiter) -> None:
    scope = dept(tokens_per_day=1000)
    first = await limiter.admit([scope], 500)
    await limiter.settle(first, 100)
    await limiter.settle(first, 100)  # a second settlement changes nothing
    await limiter.admit([scope], 900)
    refused = await refusal(limiter, [scope], 1)
    assert refused.reason == "tokens_per_day"
    until_midnight = periods.seconds_to_next_day(wall_clock_us())
    assert abs(refused.retry_after - until_midnight) <= 5
    assert refused.message.startswith("department research: 1000 tokens per day reached")
    assert refused.headers["retry-after"] == str(int(refused.retry_after))


async def test_monthly_quota(limiter: Limiter) -> None:
    scope = key(tokens_per_month=1500, tokens_per_day=10_000)
    await limiter.admit([scope], 1500)
    refused = await refusal(limiter, [scope], 1)
    assert refused.reason == "tokens_per_month"
    assert abs(refused.retry_after - periods.seconds_to_next_month(wall_clock_us())) <= 5
    over = await refusal(limiter, [key(tokens_per_month=10)], 11)
    assert over.reason == "tokens_per_month" and "can never be admitted" in over.message


async def test_usage_counts_before_a_quota_is_set(limiter: Limiter) -> None:
    """An admin who sets a quota mid-month gets the month's usage so far, not a fresh start."""
    used = await limiter.admit([dept()], 800)
    assert used.headers == {}  # no limits: no headers
    await limiter.settle(used, 700)
    await limiter.admit([dept(tokens_per_month=1000)], 300)
    assert (await refusal(limiter, [dept(tokens_per_month=1000)], 1)).reason == "tokens_per_month"


async def test_all_scopes_or_none(limiter: Limiter) -> None:
    """A key's refusal records nothing in its department."""
    department, own = dept(requests_per_minute=3), key(requests_per_minute=1)
    await limiter.admit([department, own], 0)
    refused = await refusal(limiter, [department, own])
    assert refused.scope == "key:ci" and refused.message.startswith("key ci: 1 requests")
    await limiter.admit([department], 0)
    await limiter.admit([department], 0)
    assert (await refusal(limiter, [department])).scope == "dept:research"


async def test_the_longest_wait_is_reported(limiter: Limiter) -> None:
    scopes = [dept(concurrent_requests=1, tokens_per_day=100)]
    await limiter.admit(scopes, 100)
    refused = await refusal(limiter, scopes, 1)
    assert refused.reason == "tokens_per_day"  # waiting 1 s for a slot would not be enough


async def test_headers_come_from_the_most_constraining_scope(limiter: Limiter) -> None:
    scopes = [
        dept(requests_per_minute=10, tokens_per_minute=1000),
        key(requests_per_minute=2, tokens_per_minute=5000),
    ]
    headers = (await limiter.admit(scopes, 100)).headers
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "1"
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "900"
    assert 59 <= seconds(headers["x-ratelimit-reset-tokens"]) <= 60
    assert "retry-after" not in headers


async def test_a_limit_change_applies_to_the_next_request(limiter: Limiter) -> None:
    for _ in range(3):
        await limiter.admit([dept(requests_per_minute=5)], 0)
    await refusal(limiter, [dept(requests_per_minute=3)])  # lowered: the 3 already count
    await limiter.admit([dept(requests_per_minute=10)], 0)  # raised: room again
    await limiter.admit([dept()], 0)  # lifted


async def test_no_scopes_no_limits(limiter: Limiter) -> None:
    reservation = await limiter.admit([], 10_000)
    assert reservation.headers == {} and reservation.enforced
    await limiter.settle(reservation, 5)
