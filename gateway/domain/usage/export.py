"""The CSV export: every usage_daily row in the range (one per day, department, user, key
and via), with the department's slug, the user's email and the key's name, streamed a page
at a time.

Each page is read in its own short transaction, ordered by (day, id) and continued after
the last row seen, so an export holds neither a connection nor memory for long.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import Row, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import ApiKey, Department, UsageDaily, User
from gateway.db.models.usage import COUNTER_COLUMNS
from gateway.domain.usage.query import UsageFilter

EXPORT_PAGE_SIZE = 1000
HEADER = (
    "day",
    "department_id",
    "department_slug",
    "user_id",
    "user_email",
    "api_key_id",
    "api_key_name",
    "via",
    *COUNTER_COLUMNS,
)
# A spreadsheet runs a cell that starts with one of these as a formula; names and emails
# come from admins and the IdP, so such a cell gets a leading apostrophe.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


async def csv_rows(
    db: async_sessionmaker[AsyncSession], filters: UsageFilter
) -> AsyncIterator[str]:
    yield _line(HEADER)
    after: tuple[Any, Any] | None = None
    while True:
        async with db() as session:
            page = (await session.execute(_page(filters, after))).all()
        if not page:
            return
        yield "".join(_line(_cells(row)) for row in page)
        last: UsageDaily = page[-1][0]
        after = (last.day, last.id)


def _page(filters: UsageFilter, after: tuple[Any, Any] | None) -> Any:
    u = UsageDaily
    statement = filters.apply(
        select(
            u,
            Department.slug.label("department_slug"),
            User.email.label("user_email"),
            ApiKey.name.label("api_key_name"),
        )
        .outerjoin(Department, Department.id == u.department_id)
        .outerjoin(User, User.id == u.user_id)
        .outerjoin(ApiKey, ApiKey.id == u.api_key_id)
    )
    if after is not None:
        day, row_id = after
        statement = statement.where(or_(u.day > day, (u.day == day) & (u.id > row_id)))
    return statement.order_by(u.day, u.id).limit(EXPORT_PAGE_SIZE)


def _cells(row: Row[Any]) -> list[str]:
    usage: UsageDaily = row[0]
    values: Sequence[object] = (
        usage.day.isoformat(),
        usage.department_id,
        _text(row.department_slug),
        usage.user_id,
        _text(row.user_email),
        usage.api_key_id,
        _text(row.api_key_name),
        usage.via,
        *(getattr(usage, name) for name in COUNTER_COLUMNS),
    )
    return ["" if value is None else str(value) for value in values]


def _text(value: str | None) -> str:
    if not value:
        return ""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _line(cells: Sequence[object]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(cells)
    return buffer.getvalue()
