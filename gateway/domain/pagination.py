"""Keyset pagination by primary key: each page is one indexed range query."""

from __future__ import annotations

import uuid
from typing import Any, Generic, TypeVar

import msgspec
from sqlalchemy import Select

T = TypeVar("T")
MAX_PAGE_SIZE = 200


class Page(msgspec.Struct, Generic[T]):
    items: list[T]
    next_cursor: str | None


def page_query(
    statement: Select[Any], id_column: Any, after: str | None, limit: int
) -> Select[Any]:
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
    if after:
        try:
            statement = statement.where(id_column > uuid.UUID(after))
        except ValueError:
            raise ValueError("cursor is not valid") from None
    return statement.order_by(id_column).limit(limit + 1)


def make_page(rows: list[Any], limit: int, convert: Any) -> Page[Any]:
    """``rows`` holds up to limit + 1 rows; the extra one only says there is a next page."""
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(items=[convert(r) for r in rows], next_cursor=str(rows[-1].id) if more else None)
