"""Rate limits and token quotas per department and per API key.

The proxy builds scopes with :func:`scopes_for`, calls ``admit`` before forwarding and
``settle`` when the response ends; see docs/limits.md for the semantics and headers.
"""

from gateway.domain.limits.factory import build_limiter
from gateway.domain.limits.scopes import scopes_for
from gateway.domain.limits.types import (
    Limiter,
    LimiterUnavailable,
    LimitExceeded,
    Limits,
    Reservation,
    Scope,
)

__all__ = [
    "LimitExceeded",
    "Limiter",
    "LimiterUnavailable",
    "Limits",
    "Reservation",
    "Scope",
    "build_limiter",
    "scopes_for",
]
