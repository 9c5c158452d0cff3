"""Both limiters, on a unique Redis key prefix per test (deleted after)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis
from redis.asyncio import Redis

from gateway.domain.limits.memory import InProcessLimiter
from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.limits.types import Limiter

MakeLimiter = Callable[..., Limiter]


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    value = f"test:limits:{uuid.uuid4().hex[:12]}"
    yield value
    store = redis.Redis.from_url(redis_url)
    keys = list(store.scan_iter(f"{value}:*"))
    if keys:
        store.delete(*keys)
    store.close()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def make_limiter(
    request: pytest.FixtureRequest, prefix: str, redis_url: str
) -> AsyncIterator[MakeLimiter]:
    """A factory, so a test can ask for a short lease; the same limits semantics either way."""
    if request.param == "memory":
        yield lambda **options: InProcessLimiter(**options)
        return
    client = Redis.from_url(redis_url)
    yield lambda **options: RedisLimiter(client, prefix=prefix, **options)
    await client.aclose()


@pytest.fixture
def limiter(make_limiter: MakeLimiter) -> Limiter:
    return make_limiter()
