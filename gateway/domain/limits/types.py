"""The limiter's boundary objects: what the proxy passes in and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal, Protocol, get_args

Reason = Literal[
    "requests_per_minute",
    "tokens_per_minute",
    "concurrent_requests",
    "tokens_per_day",
    "tokens_per_month",
]
REASONS: tuple[Reason, ...] = get_args(Reason)

# Every token count a limiter stores stays below this. Redis runs its scripts in Lua, whose
# numbers are doubles: past 2**53 they stop being exact integers and Redis writes them as
# floats ("1e+22"), which its integer commands then refuse for as long as the key lives.
MAX_TOKENS = 2**53 - 1


def reservation_tokens(tokens: int) -> int:
    """What ``admit`` may reserve: a whole number below MAX_TOKENS (negatives count as 0).

    A larger or non-integer count is a bug in the caller (the proxy bounds what it asks
    for), so it is refused rather than stored.
    """
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise ValueError(f"tokens must be an int, got {tokens!r}")
    if tokens > MAX_TOKENS:
        raise ValueError(f"tokens must be at most {MAX_TOKENS}, got {tokens}")
    return max(0, tokens)


def settled_tokens(tokens: int, reserved: int) -> int:
    """What ``settle`` records: clamped to 0..MAX_TOKENS, since a settlement never fails on
    a count (it comes from a worker's usage, after the response has gone out). A count
    that is not an int keeps the reservation, the safe side."""
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        return reserved
    return min(max(0, tokens), MAX_TOKENS)


@dataclass(frozen=True, slots=True)
class Limits:
    """One scope's limits; None means unlimited, 0 admits nothing (the admin API wants >= 1).

    Copied from the database rows into each principal's snapshots (identity/snapshots.py).
    """

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value < 0:
                raise ValueError(f"{f.name} must not be negative, got {value}")


@dataclass(frozen=True, slots=True)
class Scope:
    """Something that owns a share of the limits: a department or an API key."""

    key: str  # "dept:<uuid>" or "key:<uuid>": names the counters, so it must be stable
    limits: Limits
    # For people: "department research", "key ci"; the key when empty.
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.key


@dataclass(frozen=True, slots=True)
class Reservation:
    """An admitted request: hand it back to ``settle`` when the response ends."""

    id: str
    scopes: tuple[Scope, ...]
    tokens: int  # reserved at admission
    headers: dict[str, str]  # x-ratelimit-* for the response
    enforced: bool = True  # False when admitted fail-open with the limiter's store down
    # The store's clock at admission (microseconds since the epoch): settlement adjusts the
    # day and month the tokens were reserved in, not the ones it happens to run in.
    admitted_at_us: int = 0


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """What one scope has used of its quotas: tokens in the store's current UTC day and
    month (settled requests count what they used, pending ones what they reserved)."""

    day_used: int
    month_used: int
    now_us: int  # the store's clock when read: the day and month these belong to


class LimitExceeded(Exception):
    """A limit refused the request: the proxy answers 429 with these headers."""

    def __init__(
        self,
        reason: Reason,
        scope: str,
        retry_after: float,
        headers: dict[str, str],
        message: str,
    ) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.scope = scope
        self.retry_after = retry_after
        self.headers = headers
        self.message = message

    def __str__(self) -> str:
        return self.message


class LimiterUnavailable(ConnectionError):
    """The limits cannot be checked (Redis unreachable) and the gateway fails closed (503)."""


class Limiter(Protocol):
    async def admit(self, scopes: Sequence[Scope], tokens: int) -> Reservation:
        """Check every limit of every scope; record the admission in all of them, or none.

        Raises LimitExceeded when one refuses, LimiterUnavailable when the store is down.
        """
        ...

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        """Replace the reserved tokens with those used and free the concurrency slot.

        Idempotent; never raises for an unreachable store (it logs).
        """
        ...

    async def usage(self, scope: Scope) -> QuotaUsage:
        """Read ``scope``'s day and month counters without changing anything.

        Raises LimiterUnavailable when the store is down (never fails open: there is
        nothing to admit, only a number that would be wrong).
        """
        ...

    @property
    def pending_settlements(self) -> int:
        """Settlements made but not yet applied (Redis unreachable); retried until they are."""
        ...

    async def close(self) -> None: ...
