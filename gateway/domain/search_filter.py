"""The admin lists' ``q``: a case-insensitive substring match over a few text columns.

``lower(column) LIKE '%' || lower(:q) || '%'`` on both databases, with ``%``, ``_`` and the
escape character in ``q`` escaped, so the text is matched as written and never read as a
pattern. The lists stay keyset-paginated by id: the match only narrows the range query.

No index serves a leading-wildcard LIKE on Postgres; the tables these search (users,
departments, API keys) are small enough that a scan is cheap. Where users grow to many
thousands, a pg_trgm GIN index on ``lower(email)`` and ``lower(name)`` would serve this
very expression (docs/identity.md).
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
