"""The CSV export: every matching record, newest first, streamed a page at a time.

Each page is read in its own short transaction, so an export of millions of rows holds
neither a connection nor memory for long; the seq keyset makes the pages exact.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.domain.audit.query import AuditFilter, newest_first
from gateway.domain.audit.schemas import LISTED_FIELDS, to_read

EXPORT_PAGE_SIZE = 1000


async def csv_rows(
    db: async_sessionmaker[AsyncSession], filters: AuditFilter
) -> AsyncIterator[str]:
    yield _line(LISTED_FIELDS)
    after: int | None = None
    while True:
        async with db() as session:
            page = (await session.scalars(newest_first(filters, after, EXPORT_PAGE_SIZE))).all()
        if not page:
            return
        yield "".join(_line(_cells(to_read(r))) for r in page)
        after = page[-1].seq


def _cells(record: object) -> list[str]:
    cells = []
    for name in LISTED_FIELDS:
        value = getattr(record, name)
        if value is None:
            cells.append("")
        elif isinstance(value, dict):
            cells.append(json.dumps(value, sort_keys=True, ensure_ascii=False))
        elif hasattr(value, "isoformat"):
            cells.append(value.isoformat())
        else:
            cells.append(str(value))
    return cells


def _line(cells: object) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(cells)  # type: ignore[arg-type]
    return buffer.getvalue()
