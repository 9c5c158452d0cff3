"""The limiter's arithmetic without Redis: durations, scopes, the window sliding in time."""

from __future__ import annotations

import uuid

import pytest

from gateway.db.models import ApiKey, Department
from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot
from gateway.domain.limits import LimitExceeded, Limits, Scope, scopes_for
from gateway.domain.limits.headers import format_duration
from gateway.domain.limits.memory import InProcessLimiter


def test_durations_read_like_openais() -> None:
    cases = {0: "0s", 0.02: "20ms", 1: "1s", 1.5: "1.5s", 59.999: "59.999s", 360: "6m0s"}
    assert {s: format_duration(s) for s in cases} == cases
    assert format_duration(3725.25) == "1h2m5.25s"


def test_scopes_carry_each_rows_own_limits() -> None:
    department = Department(
        id=uuid.uuid4(), slug="research", requests_per_minute=60, monthly_token_quota=10**6
    )
    key = ApiKey(id=uuid.uuid4(), name="ci", tokens_per_minute=5000, daily_token_quota=9)
    scopes = scopes_for(DepartmentSnapshot.of(department), KeySnapshot.of(key))
    assert [s.key for s in scopes] == [f"dept:{department.id}", f"key:{key.id}"]
    assert scopes[0].limits == Limits(requests_per_minute=60, tokens_per_month=10**6)
    assert scopes[1].limits == Limits(tokens_per_minute=5000, tokens_per_day=9)
    assert [s.name for s in scopes] == ["department research", "key ci"]
    assert scopes_for(None, None) == []
    with pytest.raises(ValueError, match="requests_per_minute"):
        Limits(requests_per_minute=-1)


class Clock:
    def __init__(self) -> None:
        self.now_us = 1_800_000_000 * 1_000_000

    def __call__(self) -> int:
        return self.now_us

    def advance(self, seconds: float) -> None:
        self.now_us += int(seconds * 1_000_000)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_window_slides_admission_by_admission() -> None:
    clock = Clock()
    limiter = InProcessLimiter(clock=clock)
    scope = Scope("dept:x", Limits(requests_per_minute=2, tokens_per_minute=100))
    await limiter.admit([scope], 10)
    clock.advance(30)
    await limiter.admit([scope], 10)
    clock.advance(15)
    with pytest.raises(LimitExceeded) as refused:
        await limiter.admit([scope], 10)
    assert refused.value.retry_after == 15  # the first admission leaves at t = 60 s
    clock.advance(15)  # t = 60 s: exactly a minute old counts as gone
    await limiter.admit([scope], 80)  # 10 (t = 30 s) + 80 fit; the first 10 left
    with pytest.raises(LimitExceeded) as refused:
        await limiter.admit([scope], 20)
    assert refused.value.reason == "requests_per_minute"
    clock.advance(30)  # t = 90 s: the second admission has left too
    reservation = await limiter.admit([scope], 20)
    assert reservation.headers["x-ratelimit-remaining-tokens"] == "0"  # 80 + 20
    assert reservation.headers["x-ratelimit-reset-tokens"] == "30s"  # the 80 leave at 120 s
