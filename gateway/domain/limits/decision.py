"""Turning what a limiter found into a Reservation or a LimitExceeded, the same for both.

The limiters (Redis, in-process) only count; the wording, the choice of which refusal to
report and the headers live here so that both answer a client identically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.domain.limits.headers import Window, rate_headers, retry_after_header
from gateway.domain.limits.types import LimitExceeded, Reason, Reservation, Scope

# A refused slot may free at any moment; there is no better estimate than "soon".
CONCURRENCY_RETRY_S = 1.0
WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: Reason
    scope_index: int
    limit: int
    retry_after: float
    # The request alone is over the limit: waiting will not help.
    never_fits: bool = False


def admitted(
    reservation_id: str,
    scopes: Sequence[Scope],
    tokens: int,
    windows: Sequence[Window],
    now_us: int,
) -> Reservation:
    return Reservation(
        reservation_id,
        tuple(scopes),
        tokens,
        rate_headers(scopes, windows),
        admitted_at_us=now_us,
    )


def refused(
    refusals: Sequence[Refusal], scopes: Sequence[Scope], tokens: int, windows: Sequence[Window]
) -> LimitExceeded:
    """The refusal to report: one that can never fit, else the one that lasts longest.

    The request needs every limit to pass, so the longest wait is the honest Retry-After.
    """
    worst = max(refusals, key=lambda r: (r.never_fits, r.retry_after))
    retry_after = max(1.0, math.ceil(worst.retry_after))
    headers = {"retry-after": retry_after_header(retry_after), **rate_headers(scopes, windows)}
    scope = scopes[worst.scope_index]
    return LimitExceeded(
        worst.reason, scope.key, retry_after, headers, _message(worst, scope, tokens)
    )


_WHAT: dict[Reason, str] = {
    "requests_per_minute": "requests per minute",
    "tokens_per_minute": "tokens per minute",
    "concurrent_requests": "concurrent requests",
    "tokens_per_day": "tokens per day",
    "tokens_per_month": "tokens per month",
}


def _message(refusal: Refusal, scope: Scope, tokens: int) -> str:
    what = _WHAT[refusal.reason]
    if refusal.never_fits:
        return (
            f"{scope.name}: this request reserves {tokens} tokens (each prompt plus "
            f"max_tokens for each of its n completions), more than the limit of "
            f"{refusal.limit} {what}, so it can never be admitted; lower max_tokens or n, "
            "or send fewer or shorter prompts"
        )
    return f"{scope.name}: {refusal.limit} {what} reached; retry in {human(refusal.retry_after)}"


def human(seconds: float) -> str:
    """A wait for people: "12 s", "5 min", "3 h" (rounded up)."""
    if seconds <= 120:
        return f"{max(1, math.ceil(seconds))} s"
    if seconds <= 2 * 3600:
        return f"{math.ceil(seconds / 60)} min"
    return f"{math.ceil(seconds / 3600)} h"
