"""Reading the rollups: the range and filters from query parameters, and the sums.

Every parameter arrives as text and is parsed here, so a bad value is a 400 (a ValueError,
see gateway.errors) naming the parameter. The range is whole UTC days, both ends included,
at most MAX_DAYS long: each answer is a GROUP BY over at most that many days of rows.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Literal, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import utc_now
from gateway.db.models import ApiKey, Department, UsageDaily, UsageDailyDepartment, User
from gateway.db.models.usage import REFUSAL_COLUMNS
from gateway.domain.params import optional_uuid
from gateway.domain.usage.rollup import RATE_LIMIT_PREFIX
from gateway.domain.usage.schemas import (
    DailyRow,
    DailyUsage,
    ReasonCount,
    RefusalCounts,
    TopRow,
    TopUsage,
)

# YYYY-MM-DD only: fromisoformat also takes 20261231 and 2026-W53-1.
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
S = TypeVar("S", bound=Select)
MAX_DAYS = 366
DEFAULT_DAYS = 30
DEFAULT_TOP = 10
MAX_TOP = 100


@dataclass(frozen=True, slots=True)
class UsageFilter:
    since: date
    until: date  # inclusive
    department_id: uuid.UUID | None = None

    @classmethod
    def parse(cls, since: str | None, until: str | None, department_id: str | None) -> UsageFilter:
        """Both ends optional: until defaults to today (UTC), since to DEFAULT_DAYS before."""
        last = _date("until", until) or utc_now().date()
        back = min(DEFAULT_DAYS - 1, (last - date.min).days)  # no day before year 1
        first = _date("since", since) or last - timedelta(days=back)
        if first > last:
            raise ValueError(f"since: {first} is after until ({last})")
        if (last - first).days + 1 > MAX_DAYS:
            raise ValueError(f"since: a range of at most {MAX_DAYS} days, got {first}..{last}")
        return cls(first, last, optional_uuid("department_id", department_id))

    def apply(
        self, statement: S, u: type[UsageDaily] | type[UsageDailyDepartment] = UsageDaily
    ) -> S:
        """The range and department as a WHERE on ``u``'s rows."""
        statement = statement.where(u.day >= self.since, u.day <= self.until)
        if self.department_id is not None:
            statement = statement.where(u.department_id == self.department_id)
        return statement


def top_by(raw: str | None) -> Literal["user", "key"]:
    if raw in (None, "", "user"):
        return "user"
    if raw == "key":
        return "key"
    raise ValueError(f"by: 'user' or 'key', got {raw!r}")


def top_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_TOP
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"limit: not an integer: {raw!r}") from None
    if not 1 <= value <= MAX_TOP:
        raise ValueError(f"limit: must be between 1 and {MAX_TOP}, got {value}")
    return value


def _sums(u: type[UsageDaily] | type[UsageDailyDepartment] = UsageDaily) -> list[Any]:
    return [
        func.sum(u.requests).label("requests"),
        func.sum(u.prompt_tokens).label("prompt_tokens"),
        func.sum(u.completion_tokens).label("completion_tokens"),
        func.sum(u.cached_tokens).label("cached_tokens"),
    ]


async def daily(db: AsyncSession, filters: UsageFilter) -> DailyUsage:
    """Per day, department and via: exactly the coarse table's key, so each answer row is
    one stored row (no sum), with its department's names."""
    u, d = UsageDailyDepartment, Department
    statement = filters.apply(
        select(
            u.day,
            u.department_id,
            func.coalesce(d.slug, "").label("slug"),
            func.coalesce(d.name, "").label("name"),
            u.via,
            u.requests,
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            u.errors,
            u.refusals,
        ).outerjoin(d, d.id == u.department_id),
        u,
    )
    rows = [
        DailyRow(
            day=_as_date(r.day),
            department_id=r.department_id,
            department_slug=r.slug,
            department_name=r.name,
            via=r.via,
            requests=int(r.requests),
            prompt_tokens=int(r.prompt_tokens),
            completion_tokens=int(r.completion_tokens),
            cached_tokens=int(r.cached_tokens),
            errors=int(r.errors),
            refusals=int(r.refusals),
        )
        for r in (await db.execute(statement)).all()
    ]
    rows.sort(key=lambda row: (row.day, row.department_slug, str(row.department_id), row.via))
    return DailyUsage(filters.since, filters.until, rows)


async def top(
    db: AsyncSession, filters: UsageFilter, by: Literal["user", "key"], limit: int
) -> TopUsage:
    u = UsageDaily
    column = u.user_id if by == "user" else u.api_key_id
    total = (func.sum(u.prompt_tokens) + func.sum(u.completion_tokens)).label("total")
    statement = (
        filters.apply(select(column.label("id"), *_sums(), total))
        .where(column.is_not(None))
        .group_by(column)
        .order_by(total.desc(), func.sum(u.requests).desc(), column)
        .limit(limit)
    )
    sums = (await db.execute(statement)).all()
    ids = [row.id for row in sums]
    labels, departments = await _who(db, by, ids, filters)
    items = [
        TopRow(
            id=row.id,
            label=labels.get(row.id, ""),
            department_id=departments.get(row.id),
            requests=int(row.requests),
            prompt_tokens=int(row.prompt_tokens),
            completion_tokens=int(row.completion_tokens),
            cached_tokens=int(row.cached_tokens),
            total_tokens=int(row.total),
        )
        for row in sums
    ]
    return TopUsage(by, filters.since, filters.until, items)


async def _who(
    db: AsyncSession, by: Literal["user", "key"], ids: list[uuid.UUID], filters: UsageFilter
) -> tuple[dict[uuid.UUID, str], dict[uuid.UUID, uuid.UUID | None]]:
    """Each id's email or key name, and its department (a key's own; a user's where the
    most tokens went in the range, as users may move between departments)."""
    if not ids:
        return {}, {}
    if by == "key":
        keys = (
            await db.execute(
                select(ApiKey.id, ApiKey.name, ApiKey.department_id).where(ApiKey.id.in_(ids))
            )
        ).all()
        return {k.id: k.name for k in keys}, {k.id: k.department_id for k in keys}
    users = (await db.execute(select(User.id, User.email).where(User.id.in_(ids)))).all()
    u = UsageDaily
    spent = func.sum(u.prompt_tokens + u.completion_tokens)
    where = filters.apply(select(u.user_id, u.department_id, spent.label("spent")))
    per_department = (
        await db.execute(where.where(u.user_id.in_(ids)).group_by(u.user_id, u.department_id))
    ).all()
    most: dict[uuid.UUID, tuple[int, uuid.UUID | None]] = {}
    for row in per_department:
        best = most.get(row.user_id)
        if best is None or int(row.spent) > best[0]:
            most[row.user_id] = (int(row.spent), row.department_id)
    return {r.id: r.email for r in users}, {k: v[1] for k, v in most.items()}


async def refusals(db: AsyncSession, filters: UsageFilter) -> RefusalCounts:
    u = UsageDailyDepartment  # the same sums as usage_daily's, from far fewer rows
    columns = [func.coalesce(func.sum(u.refusals), 0)] + [
        func.coalesce(func.sum(getattr(u, column)), 0) for column in REFUSAL_COLUMNS.values()
    ]
    statement = filters.apply(select(*columns), u)
    sums: Sequence[int] = (await db.execute(statement)).one()
    total, counts = sums[0], sums[1:]
    reasons = [
        ReasonCount(RATE_LIMIT_PREFIX + reason, int(count))
        for reason, count in zip(REFUSAL_COLUMNS, counts, strict=True)
    ]
    return RefusalCounts(filters.since, filters.until, int(total), reasons)


def _as_date(value: object) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def _date(name: str, raw: str | None) -> date | None:
    if not raw:
        return None
    try:
        if _DATE.fullmatch(raw):
            return date.fromisoformat(raw)
    except ValueError:
        pass
    raise ValueError(f"{name}: not a date such as 2026-12-31: {raw!r}")
