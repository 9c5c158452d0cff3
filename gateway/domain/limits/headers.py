"""The ``x-ratelimit-*`` and ``Retry-After`` headers, as OpenAI sends them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.domain.limits.types import Scope


@dataclass(frozen=True, slots=True)
class Window:
    """One scope's sliding minute as one admission saw it (this request counted if admitted)."""

    requests: int = 0
    # Until the oldest admission in the window leaves it, so that one more request fits.
    requests_reset_s: float = 0.0
    tokens: int = 0
    tokens_reset_s: float = 0.0


def rate_headers(scopes: Sequence[Scope], windows: Sequence[Window]) -> dict[str, str]:
    """Request and token headers, each from the scope with the least remaining.

    Only per-minute limits are reported (that is what the headers mean to OpenAI's
    clients); a request under no such limit gets no headers.
    """
    headers: dict[str, str] = {}
    requests = [
        (s.limits.requests_per_minute, w.requests, w.requests_reset_s)
        for s, w in zip(scopes, windows, strict=True)
        if s.limits.requests_per_minute is not None
    ]
    tokens = [
        (s.limits.tokens_per_minute, w.tokens, w.tokens_reset_s)
        for s, w in zip(scopes, windows, strict=True)
        if s.limits.tokens_per_minute is not None
    ]
    for kind, rows in (("requests", requests), ("tokens", tokens)):
        if not rows:
            continue
        limit, used, reset = min(rows, key=lambda r: (r[0] - r[1], -r[2]))
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
        headers[f"x-ratelimit-reset-{kind}"] = format_duration(reset)
    return headers


def retry_after_header(seconds: float) -> str:
    """Whole seconds, rounded up, at least 1 (HTTP's Retry-After has no fractions)."""
    return str(max(1, math.ceil(seconds)))


def format_duration(seconds: float) -> str:
    """Durations the way OpenAI writes them (Go's style): "20ms", "1s", "1.5s", "6m0s"."""
    ms = max(0, round(seconds * 1000))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, frac = divmod(rest, 1000)
    secs = f"{whole}.{frac:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs
