"""Failed local logins, counted per account and per client address, to slow password guessing.

Every attempt is counted before its password is checked, so a burst of concurrent guesses
cannot all slip in under the limit; an attempt that did not fail gives its count back (a
success also clears its account's count). Past either limit the login is refused with 429
and ``Retry-After`` without checking the password at all: no argon2 work for the guesser.
Each count is a fixed window that opens with its first attempt.

The counters live in Redis when the gateway has it, so the limit holds across replicas;
otherwise in this process (the embedded default runs one).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from litestar.exceptions import TooManyRequestsException
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.settings import Settings

REDIS_PREFIX = "enclave:login"
MAX_IN_PROCESS = 100_000  # counters kept in process; the oldest go first

# INCR each key; a key's first count opens its window. Returns count, seconds left per key.
_HIT = """
local out = {}
for _, key in ipairs(KEYS) do
  local count = redis.call('INCR', key)
  local ttl = redis.call('TTL', key)
  if ttl < 0 then
    redis.call('EXPIRE', key, ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  out[#out + 1] = count
  out[#out + 1] = ttl
end
return out
"""
# Give one count back, never creating a key (a DECR on a gone key would leave -1 forever).
_UNDO = """
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then redis.call('DECR', key) end
end
return 0
"""


class Counters(Protocol):
    async def hit(self, keys: Sequence[str], window_s: int) -> list[tuple[int, int]]:
        """Count one attempt on each key: its count and the seconds left in its window."""

    async def undo(self, keys: Sequence[str]) -> None:
        """Give back one count on each key."""

    async def clear(self, key: str) -> None: ...


class InProcessCounters:
    def __init__(self, max_entries: int = MAX_IN_PROCESS) -> None:
        self.max_entries = max_entries
        self._counts: OrderedDict[str, list[float]] = OrderedDict()  # key -> [count, ends]

    async def hit(self, keys: Sequence[str], window_s: int) -> list[tuple[int, int]]:
        now = time.monotonic()
        out = []
        for key in keys:
            entry = self._counts.get(key)
            if entry is None or entry[1] <= now:
                entry = self._counts[key] = [0, now + window_s]
            entry[0] += 1
            self._counts.move_to_end(key)
            out.append((int(entry[0]), max(1, round(entry[1] - now))))
        while len(self._counts) > self.max_entries:
            self._counts.popitem(last=False)
        return out

    async def undo(self, keys: Sequence[str]) -> None:
        for key in keys:
            entry = self._counts.get(key)
            if entry is not None:
                entry[0] -= 1

    async def clear(self, key: str) -> None:
        self._counts.pop(key, None)


class RedisCounters:
    def __init__(self, redis: Redis, prefix: str = REDIS_PREFIX) -> None:
        self.prefix = prefix
        self._redis = redis
        self._hit = redis.register_script(_HIT)
        self._undo = redis.register_script(_UNDO)

    async def hit(self, keys: Sequence[str], window_s: int) -> list[tuple[int, int]]:
        flat = await self._call(self._hit(keys=self._names(keys), args=[window_s]))
        return [(int(flat[i]), max(1, int(flat[i + 1]))) for i in range(0, len(flat), 2)]

    async def undo(self, keys: Sequence[str]) -> None:
        await self._call(self._undo(keys=self._names(keys)))

    async def clear(self, key: str) -> None:
        await self._call(self._redis.delete(*self._names([key])))

    def _names(self, keys: Sequence[str]) -> list[str]:
        return [f"{self.prefix}:{key}" for key in keys]

    async def _call(self, pending: object) -> list[int]:
        try:
            result = await pending  # type: ignore[misc]
        except (RedisError, OSError) as exc:
            # Fail closed: sessions live in the same Redis, so sign-in cannot work anyway.
            raise ConnectionError("sign-in is unavailable (Redis cannot be reached)") from exc
        return result if isinstance(result, list) else []


@dataclass(frozen=True, slots=True)
class ThrottleLimits:
    per_account: int
    per_address: int
    window_s: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ThrottleLimits:
        return cls(
            settings.login_max_failures_per_account,
            settings.login_max_failures_per_address,
            settings.login_failure_window_seconds,
        )


class LoginThrottle:
    def __init__(self, counters: Counters, limits: ThrottleLimits) -> None:
        self.counters = counters
        self.limits = limits

    @asynccontextmanager
    async def attempt(self, email: str, address: str) -> AsyncIterator[None]:
        """Around one password check: refuses past a limit; a PermissionError is a failure."""
        account_key = "account:" + hashlib.sha256(email.strip().lower().encode()).hexdigest()
        keys = [account_key, "address:" + (address or "unknown")]
        counts = await self.counters.hit(keys, self.limits.window_s)
        limits = (self.limits.per_account, self.limits.per_address)
        waits = [left for (count, left), limit in zip(counts, limits, strict=True) if count > limit]
        if waits:
            raise TooManyRequestsException(
                "too many failed sign-ins; try again later",
                headers={"retry-after": str(max(waits))},
            )
        try:
            yield
        except PermissionError:
            raise  # a failed sign-in: its count stays
        except Exception:
            await self.counters.undo(keys)  # not the caller's failure (the database is down)
            raise
        await self.counters.clear(account_key)  # signed in: the account starts afresh
        await self.counters.undo(keys[1:])


def build_login_throttle(settings: Settings, redis: Redis | None) -> LoginThrottle:
    counters: Counters = RedisCounters(redis) if redis is not None else InProcessCounters()
    return LoginThrottle(counters, ThrottleLimits.from_settings(settings))
