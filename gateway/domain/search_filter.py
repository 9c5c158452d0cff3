"""The admin lists' ``q``: a case-insensitive substring match over a few text columns.

``column ILIKE '%' || :q || '%'`` on Postgres and ``lower(column) LIKE lower(...)`` on
SQLite (SQLAlchemy's icontains), with ``%``, ``_`` and the escape character in ``q``
escaped, so the text is matched as written and never read as a pattern. The lists stay
keyset-paginated by id: the match only narrows the range query.

A leading-wildcard pattern has no btree index to use. On Postgres, migration 0006 adds
pg_trgm GIN indexes on users (email, name) and api_keys (name, display_prefix), which serve
ILIKE, where the extension can be had (docs/identity.md); otherwise, and on SQLite, the
match scans, which the departments (few) always do.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, or_

MAX_QUERY_CHARS = 200


def matching(q: str | None, *columns: Any) -> ColumnElement[bool] | None:
    """The condition for ``q`` over ``columns``; None for no (or a blank) ``q``."""
    if q is None or not q.strip():
        return None
    text = q.strip()
    if len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"q must be at most {MAX_QUERY_CHARS} characters")
    if "\x00" in text:
        raise ValueError("q must not contain a NUL character")
    return or_(*(column.icontains(text, autoescape=True) for column in columns))
