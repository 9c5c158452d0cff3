"""The failed-login throttle, the same semantics in process and in (real) Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis
from litestar.exceptions import TooManyRequestsException
from redis.asyncio import Redis

from gateway.domain.identity.login_throttle import (
    Counters,
    InProcessCounters,
    LoginThrottle,
    RedisCounters,
    ThrottleLimits,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(params=["memory", "redis"])
async def counters(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Counters]:
    if request.param == "memory":
        yield InProcessCounters()
        return
    prefix = f"test:login:{uuid.uuid4().hex[:12]}"  # other tests share this Redis
    client = Redis.from_url(redis_url)
    yield RedisCounters(client, prefix=prefix)
    await client.aclose()
    store = redis.Redis.from_url(redis_url)
    keys = list(store.scan_iter(f"{prefix}:*"))
    if keys:
        store.delete(*keys)
    store.close()


async def _try(throttle: LoginThrottle, email: str, address: str, ok: bool) -> int:
    """One sign-in attempt: 200 signed in, 401 wrong password, 429 throttled."""
    try:
        async with throttle.attempt(email, address):
            if not ok:
                raise PermissionError("wrong email or password")
    except PermissionError:
        return 401
    except TooManyRequestsException as exc:
        assert exc.headers is not None
        assert 1 <= int(exc.headers["retry-after"]) <= 60
        return 429
    return 200


async def test_per_account_limit_refuses_even_the_right_password(counters: Counters) -> None:
    throttle = LoginThrottle(counters, ThrottleLimits(per_account=3, per_address=100, window_s=60))
    results = [await _try(throttle, "a@x.test", f"10.0.0.{i}", ok=False) for i in range(3)]
    assert results == [401, 401, 401]
    # Locked, from any address, whatever the password: it is not even checked.
    assert await _try(throttle, " A@X.test ", "10.0.0.9", ok=True) == 429
    assert await _try(throttle, "b@x.test", "10.0.0.9", ok=True) == 200  # others unaffected


async def test_per_address_limit_spans_accounts(counters: Counters) -> None:
    throttle = LoginThrottle(counters, ThrottleLimits(per_account=100, per_address=4, window_s=60))
    for i in range(4):
        assert await _try(throttle, f"user{i}@x.test", "10.1.1.1", ok=False) == 401
    assert await _try(throttle, "fresh@x.test", "10.1.1.1", ok=True) == 429
    assert await _try(throttle, "fresh@x.test", "10.1.1.2", ok=True) == 200


async def test_success_clears_the_account_and_errors_do_not_count(counters: Counters) -> None:
    throttle = LoginThrottle(counters, ThrottleLimits(per_account=2, per_address=3, window_s=60))
    assert await _try(throttle, "a@x.test", "10.2.2.2", ok=False) == 401
    assert await _try(throttle, "a@x.test", "10.2.2.2", ok=True) == 200  # account starts afresh
    with pytest.raises(ConnectionError):  # not the caller's failure: given back
        async with throttle.attempt("a@x.test", "10.2.2.2"):
            raise ConnectionError("database down")
    assert await _try(throttle, "a@x.test", "10.2.2.2", ok=False) == 401
    assert await _try(throttle, "a@x.test", "10.2.2.2", ok=False) == 401
    assert await _try(throttle, "a@x.test", "10.2.2.2", ok=False) == 429  # account: 3 > 2
    # The address counted 3 failures (the success and the error gave theirs back).
    assert await _try(throttle, "b@x.test", "10.2.2.2", ok=True) == 429


async def test_concurrent_guesses_cannot_all_slip_under_the_limit(counters: Counters) -> None:
    throttle = LoginThrottle(counters, ThrottleLimits(per_account=5, per_address=100, window_s=60))

    async def guess() -> int:
        try:
            async with throttle.attempt("a@x.test", "10.3.3.3"):
                await asyncio.sleep(0.05)  # the password check, in flight
                raise PermissionError("wrong email or password")
        except PermissionError:
            return 401
        except TooManyRequestsException:
            return 429

    results = await asyncio.gather(*(guess() for _ in range(12)))
    assert sorted(results) == [401] * 5 + [429] * 7


async def test_the_window_ends(counters: Counters) -> None:
    throttle = LoginThrottle(counters, ThrottleLimits(per_account=1, per_address=100, window_s=1))
    assert await _try(throttle, "a@x.test", "10.4.4.4", ok=False) == 401
    assert await _try(throttle, "a@x.test", "10.4.4.4", ok=True) == 429
    await asyncio.sleep(2.1)
    assert await _try(throttle, "a@x.test", "10.4.4.4", ok=True) == 200


async def test_redis_down_refuses_sign_in_with_a_clear_error() -> None:
    client = Redis.from_url("redis://127.0.0.1:1/0")  # nothing listens there
    throttle = LoginThrottle(RedisCounters(client), ThrottleLimits(5, 20, 60))
    with pytest.raises(ConnectionError, match="Redis"):
        async with throttle.attempt("a@x.test", "10.5.5.5"):
            pass
    await client.aclose()
