"""The in-process limiter: the embedded default, one gateway process, no Redis.

Same semantics as the Redis limiter (sliding minute windows, UTC day and month counters,
leased concurrency slots), counted in this process's memory under one asyncio lock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.domain.limits import periods
from gateway.domain.limits.decision import (
    CONCURRENCY_RETRY_S,
    WINDOW_S,
    Refusal,
    admitted,
    refused,
)
from gateway.domain.limits.headers import Window
from gateway.domain.limits.types import (
    QuotaUsage,
    Reservation,
    Scope,
    reservation_tokens,
    settled_tokens,
)

WINDOW_US = int(WINDOW_S * periods.US_PER_S)
DEFAULT_LEASE_S = 15 * 60


def wall_clock_us() -> int:
    return time.time_ns() // 1000


@dataclass(slots=True)
class _Counters:
    """One scope's state. Minute entries are kept oldest first (admission order)."""

    requests: deque[int] = field(default_factory=deque)  # admission times
    tokens: dict[str, list[int]] = field(default_factory=dict)  # id -> [time, tokens]
    token_sum: int = 0
    slots: dict[str, int] = field(default_factory=dict)  # id -> lease end
    day: int = -1
    day_used: int = 0
    month: int = -1
    month_used: int = 0

    def expire(self, now: int) -> None:
        start = now - WINDOW_US
        while self.requests and self.requests[0] <= start:
            self.requests.popleft()
        while self.tokens:
            oldest = next(iter(self.tokens))
            if self.tokens[oldest][0] > start:
                break
            self.token_sum -= self.tokens.pop(oldest)[1]
        for rid in [rid for rid, end in self.slots.items() if end <= now]:
            del self.slots[rid]
        if self.day != periods.day_of(now):
            self.day, self.day_used = periods.day_of(now), 0
        if self.month != periods.month_of(now):
            self.month, self.month_used = periods.month_of(now), 0

    def window(self, now: int) -> Window:
        def reset(oldest: int | None) -> float:
            return 0.0 if oldest is None else (oldest + WINDOW_US - now) / periods.US_PER_S

        first_tokens = next(iter(self.tokens.values()), None)
        return Window(
            len(self.requests),
            reset(self.requests[0] if self.requests else None),
            self.token_sum,
            reset(first_tokens[0] if first_tokens else None),
        )


class InProcessLimiter:
    def __init__(self, lease_s: float = DEFAULT_LEASE_S, clock: Callable[[], int] = wall_clock_us):
        self._lease_us = int(lease_s * periods.US_PER_S)
        self._clock = clock
        self._lock = asyncio.Lock()
        self._counters: dict[str, _Counters] = {}
        self._settled: dict[str, int] = {}  # id -> when to forget it, oldest first

    async def admit(self, scopes: Sequence[Scope], tokens: int) -> Reservation:
        tokens = reservation_tokens(tokens)
        rid = uuid.uuid4().hex
        async with self._lock:
            now = self._clock()
            states = [self._counters.setdefault(s.key, _Counters()) for s in scopes]
            for state in states:
                state.expire(now)
            refusals = [
                refusal
                for index, (scope, state) in enumerate(zip(scopes, states, strict=True))
                for refusal in _check(index, scope, state, tokens, now)
            ]
            if refusals:
                windows = [state.window(now) for state in states]
                raise refused(refusals, scopes, tokens, windows)
            for scope, state in zip(scopes, states, strict=True):
                _record(rid, scope, state, tokens, now, now + self._lease_us)
            windows = [state.window(now) for state in states]
        return admitted(rid, scopes, tokens, windows, now)

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        if not reservation.enforced:
            return
        used = settled_tokens(used_tokens, reservation.tokens)
        delta = used - reservation.tokens
        async with self._lock:
            now = self._clock()
            while self._settled and next(iter(self._settled.values())) <= now:
                del self._settled[next(iter(self._settled))]
            if reservation.id in self._settled:
                return
            self._settled[reservation.id] = now + self._lease_us
            day = periods.day_of(reservation.admitted_at_us)
            month = periods.month_of(reservation.admitted_at_us)
            for scope in reservation.scopes:
                state = self._counters.get(scope.key)
                if state is None:
                    continue
                state.slots.pop(reservation.id, None)
                entry = state.tokens.get(reservation.id)
                if entry is not None:
                    entry[1] = used
                    state.token_sum += delta
                if state.day == day:
                    state.day_used += delta
                if state.month == month:
                    state.month_used += delta

    async def usage(self, scope: Scope) -> QuotaUsage:
        async with self._lock:
            now = self._clock()
            state = self._counters.get(scope.key)
            if state is None:
                return QuotaUsage(0, 0, now)
            # Read as expire() would roll over, without touching the counters.
            day = state.day_used if state.day == periods.day_of(now) else 0
            month = state.month_used if state.month == periods.month_of(now) else 0
            return QuotaUsage(day, month, now)

    @property
    def pending_settlements(self) -> int:
        return 0  # applied under the lock, at once

    async def close(self) -> None:
        self._counters.clear()


def _check(index: int, scope: Scope, state: _Counters, tokens: int, now: int) -> list[Refusal]:
    limits, found = scope.limits, []
    rpm = limits.requests_per_minute
    if rpm is not None and len(state.requests) >= rpm:
        # The (count - limit + 1)-th oldest admission must leave before one more fits.
        frees_at = state.requests[len(state.requests) - rpm] if rpm else now
        found.append(Refusal("requests_per_minute", index, rpm, _until(frees_at, now)))
    tpm = limits.tokens_per_minute
    if tpm is not None and tokens > tpm:
        found.append(Refusal("tokens_per_minute", index, tpm, WINDOW_S, never_fits=True))
    elif tpm is not None and state.token_sum + tokens > tpm:
        remaining = state.token_sum
        for at, reserved in state.tokens.values():
            remaining -= reserved
            if remaining + tokens <= tpm:
                found.append(Refusal("tokens_per_minute", index, tpm, _until(at, now)))
                break
    slots = limits.concurrent_requests
    if slots is not None and len(state.slots) >= slots:
        found.append(Refusal("concurrent_requests", index, slots, CONCURRENCY_RETRY_S))
    day, month = limits.tokens_per_day, limits.tokens_per_month
    if day is not None and state.day_used + tokens > day:
        wait = periods.seconds_to_next_day(now)
        found.append(Refusal("tokens_per_day", index, day, wait, never_fits=tokens > day))
    if month is not None and state.month_used + tokens > month:
        wait = periods.seconds_to_next_month(now)
        found.append(Refusal("tokens_per_month", index, month, wait, never_fits=tokens > month))
    return found


def _record(
    rid: str, scope: Scope, state: _Counters, tokens: int, now: int, lease_end: int
) -> None:
    limits = scope.limits
    if limits.requests_per_minute is not None:
        state.requests.append(now)
    if limits.tokens_per_minute is not None:
        state.tokens[rid] = [now, tokens]
        state.token_sum += tokens
    if limits.concurrent_requests is not None:
        state.slots[rid] = lease_end
    state.day_used += tokens  # always counted, so a quota set mid-month sees the month so far
    state.month_used += tokens


def _until(entry_us: int, now: int) -> float:
    return (entry_us + WINDOW_US - now) / periods.US_PER_S
