"""Which limiter a gateway runs: Redis when it has one, else the in-process default."""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.domain.limits.memory import InProcessLimiter
from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.limits.types import Limiter
from gateway.settings import Settings


def build_limiter(settings: Settings, redis: Redis | None) -> Limiter:
    """One limiter per process. Without Redis there is nothing to share limits with, so
    the in-process limiter is exact for the one embedded gateway process."""
    if redis is not None:
        return RedisLimiter(redis, fail_open=settings.limits_fail_open)
    return InProcessLimiter()
