"""What a caller's department has used of its token quotas, as `/api/me/usage` shows it.

The counters are the department's scope, the one the proxy holds its requests to (built
by :func:`scopes_for`, so the key format lives in one place). An API key's own quotas are
not shown: the UI is for people, and a person is held to the department's.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from gateway.domain.limits import periods
from gateway.domain.limits.memory import wall_clock_us
from gateway.domain.limits.scopes import scopes_for
from gateway.domain.limits.types import Limiter, QuotaUsage

if TYPE_CHECKING:
    from gateway.domain.identity.snapshots import DepartmentSnapshot


class QuotaPeriod(msgspec.Struct):
    """One UTC period's quota: ``limit`` and ``remaining`` are null when it is unlimited."""

    limit: int | None
    used: int
    remaining: int | None
    resets_at: datetime  # the start of the next UTC day or month


class UsageRead(msgspec.Struct):
    """The caller's department's token quotas; department null (and nothing used) when
    the caller is in none."""

    department: str | None
    day: QuotaPeriod
    month: QuotaPeriod


def _period(limit: int | None, used: int, resets_at: datetime) -> QuotaPeriod:
    remaining = None if limit is None else max(0, limit - used)
    return QuotaPeriod(limit, used, remaining, resets_at)


def usage_read(department: DepartmentSnapshot | None, usage: QuotaUsage) -> UsageRead:
    limits = department.limits if department else None
    now = usage.now_us  # the store's clock: the day and month the counters belong to
    return UsageRead(
        department=department.slug if department else None,
        day=_period(
            limits.tokens_per_day if limits else None,
            usage.day_used,
            periods.next_day_start(now),
        ),
        month=_period(
            limits.tokens_per_month if limits else None,
            usage.month_used,
            periods.next_month_start(now),
        ),
    )


async def department_usage(limiter: Limiter, department: DepartmentSnapshot | None) -> UsageRead:
    """Raises LimiterUnavailable (a 503) when the limits store is down."""
    if department is None:
        return usage_read(None, QuotaUsage(0, 0, wall_clock_us()))
    (scope,) = scopes_for(department, None)
    return usage_read(department, await limiter.usage(scope))
