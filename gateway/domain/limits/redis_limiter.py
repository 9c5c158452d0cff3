"""The Redis limiter: exact limits shared by every gateway replica on one Redis.

Each admission is one EVALSHA of :data:`lua.ADMIT`, each settlement one of
:data:`lua.SETTLE`; see that module for the keys. When Redis cannot be reached the
gateway fails closed (LimiterUnavailable, a 503) unless configured to fail open, and then
it admits unenforced and says so in the log: it never counts per process instead.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import structlog
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.domain.limits import lua, periods
from gateway.domain.limits.decision import WINDOW_S, Refusal, admitted, refused
from gateway.domain.limits.headers import Window
from gateway.domain.limits.memory import DEFAULT_LEASE_S
from gateway.domain.limits.types import (
    MAX_TOKENS,
    REASONS,
    LimiterUnavailable,
    QuotaUsage,
    Reservation,
    Scope,
    reservation_tokens,
    settled_tokens,
)
from gateway.domain.limits.unsettled import Settlement, UnsettledQueue

log = structlog.get_logger("gateway.limits")

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError)
DEFAULT_PREFIX = "enclave:limits"


class RedisLimiter:
    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        fail_open: bool = False,
        lease_s: float = DEFAULT_LEASE_S,
        timeout_s: float = 2.0,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._fail_open = fail_open
        self._lease_us = int(lease_s * periods.US_PER_S)
        # A Redis that hangs must not hang every request: past this, it counts as down.
        self._timeout_s = timeout_s
        self._admit = redis.register_script(lua.ADMIT)
        self._settle = redis.register_script(lua.SETTLE)
        # Settlements Redis could not take when they were made, retried until it does.
        self.unsettled = UnsettledQueue(self._send, UNREACHABLE)

    def _keys(self, scope: Scope, kinds: Sequence[str]) -> list[str]:
        return [f"{self._prefix}:{scope.key}:{kind}" for kind in kinds]

    async def admit(self, scopes: Sequence[Scope], tokens: int) -> Reservation:
        tokens = reservation_tokens(tokens)
        rid = uuid.uuid4().hex
        if not scopes:
            return Reservation(rid, (), tokens, {})
        keys: list[str] = []
        args: list[int | str] = [
            rid,
            str(tokens),
            self._lease_us,
            int(WINDOW_S * periods.US_PER_S),
            lua.QUOTA_TTL_MS,
        ]
        for scope in scopes:
            keys += self._keys(scope, ("rpm", "tpm", "tpmsum", "conc", "quota"))
            limits = scope.limits
            args += [
                lua.NO_LIMIT if value is None else value
                for value in (
                    limits.requests_per_minute,
                    limits.tokens_per_minute,
                    limits.concurrent_requests,
                    limits.tokens_per_day,
                    limits.tokens_per_month,
                )
            ]
        try:
            async with asyncio.timeout(self._timeout_s):
                reply = await self._admit(keys=keys, args=args)
        except UNREACHABLE as exc:
            if not self._fail_open:
                raise LimiterUnavailable(
                    "rate limits cannot be checked: the limits store (Redis) is unreachable"
                ) from exc
            log.warning("limits_not_enforced", reason="redis unreachable", error=str(exc))
            return Reservation(rid, tuple(scopes), tokens, {}, enforced=False)
        return _conclude(rid, scopes, tokens, [int(v) for v in reply])

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        if not reservation.enforced or not reservation.scopes:
            return
        keys = [f"{self._prefix}:settled:{reservation.id}"]
        for scope in reservation.scopes:
            keys += self._keys(scope, ("tpm", "tpmsum", "conc", "quota"))
        at = reservation.admitted_at_us
        args: list[int | str] = [
            reservation.id,
            str(reservation.tokens),
            str(settled_tokens(used_tokens, reservation.tokens)),
            periods.day_of(at),
            periods.month_of(at),
            self._lease_us // 1000,
        ]
        settlement = Settlement(reservation.id, tuple(keys), tuple(args))
        try:
            await self._send(settlement)
        except UNREACHABLE as exc:
            # Kept and retried until Redis takes it (see unsettled.py); until then the
            # reservation stays counted, the safe side, and the slot's lease ends it.
            log.warning("limits_settle_deferred", reservation=reservation.id, error=str(exc))
            self.unsettled.add(settlement)

    async def usage(self, scope: Scope) -> QuotaUsage:
        """TIME and the quota hash in one MULTI, so the clock is the one the counters were
        read at; a day or month other than the current one has rolled over: 0 used."""
        (quota_key,) = self._keys(scope, ("quota",))
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.time()
                    pipe.hmget(quota_key, ["d", "du", "m", "mu"])
                    (seconds, micros), (day, day_used, month, month_used) = await pipe.execute()
        except UNREACHABLE as exc:
            raise LimiterUnavailable(
                "quota usage cannot be read: the limits store (Redis) is unreachable"
            ) from exc
        now = int(seconds) * periods.US_PER_S + int(micros)
        return QuotaUsage(
            _stored(day_used) if _stored(day) == periods.day_of(now) else 0,
            _stored(month_used) if _stored(month) == periods.month_of(now) else 0,
            now,
        )

    async def _send(self, settlement: Settlement) -> None:
        async with asyncio.timeout(self._timeout_s):
            await self._settle(keys=list(settlement.keys), args=list(settlement.args))

    @property
    def pending_settlements(self) -> int:
        return len(self.unsettled)

    async def close(self) -> None:
        """Stops retrying settlements (after a last try); the Redis client belongs to the
        gateway state, which closes it."""
        await self.unsettled.close()


def _stored(raw: bytes | str | None) -> int:
    """A counter as the scripts' stored() reads it: absent or garbage is 0, a float left
    by an older version is the number it says, clamped to 0..MAX_TOKENS."""
    try:
        value = float(raw) if raw is not None else 0.0
    except ValueError:
        return 0
    if value != value:  # NaN
        return 0
    return int(min(max(value, 0.0), float(MAX_TOKENS)))


def _conclude(rid: str, scopes: Sequence[Scope], tokens: int, reply: list[int]) -> Reservation:
    ok, now = reply[0] == 1, reply[1]
    windows = []
    for i in range(len(scopes)):
        requests, requests_reset, in_tokens, tokens_reset = reply[4 + 4 * i : 8 + 4 * i]
        windows.append(
            Window(
                requests,
                requests_reset / periods.US_PER_S,
                in_tokens,
                tokens_reset / periods.US_PER_S,
            )
        )
    if ok:
        return admitted(rid, scopes, tokens, windows, now)
    rest = reply[4 + 4 * len(scopes) :]
    refusals = []
    for j in range(0, len(rest), 4):
        code, index, retry_us, never_fits = rest[j : j + 4]
        reason = REASONS[code - 1]
        if reason == "tokens_per_day":
            retry = periods.seconds_to_next_day(now)
        elif reason == "tokens_per_month":
            retry = periods.seconds_to_next_month(now)
        else:
            retry = retry_us / periods.US_PER_S
        limit = getattr(scopes[index].limits, reason)
        refusals.append(Refusal(reason, index, limit, retry, never_fits == 1))
    raise refused(refusals, scopes, tokens, windows)
