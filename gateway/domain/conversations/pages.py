"""Newest-updated first, keyset-paged on (updated_at, id): ties in updated_at are broken by
id, so a page boundary inside a tie neither repeats nor skips a conversation.

The cursor is opaque to clients (base64 of the last row's key); anything that does not
decode to a key is a 400, never a query.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, and_, or_

from gateway.db.base import as_utc
from gateway.db.models import Conversation
from gateway.domain.pagination import MAX_PAGE_SIZE, Page

MAX_CURSOR_CHARS = 200


def encode_cursor(updated_at: datetime, conversation_id: uuid.UUID) -> str:
    key = f"{as_utc(updated_at).astimezone(UTC).isoformat()}|{conversation_id}"
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, _, raw_id = key.partition("|")
        updated_at = datetime.fromisoformat(moment)
        if updated_at.tzinfo is None:
            raise ValueError
        return updated_at.astimezone(UTC), uuid.UUID(raw_id)
    except (ValueError, binascii.Error, UnicodeDecodeError, OverflowError):
        raise ValueError("cursor is not valid") from None


def newest_first(statement: Select[Any], after: str | None, limit: int) -> Select[Any]:
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
    c = Conversation
    if after:
        updated_at, last_id = decode_cursor(after)
        statement = statement.where(
            or_(c.updated_at < updated_at, and_(c.updated_at == updated_at, c.id < last_id))
        )
    return statement.order_by(c.updated_at.desc(), c.id.desc()).limit(limit + 1)


def make_page(rows: list[Conversation], limit: int, convert: Any) -> Page[Any]:
    """``rows`` holds up to limit + 1 rows; the extra one only says there is a next page."""
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor(rows[-1].updated_at, rows[-1].id) if more else None
    return Page(items=[convert(r) for r in rows], next_cursor=cursor)
