"""Searching the log: filters from query parameters, newest first, keyset pages by seq.

Every parameter arrives as text and is parsed here, so that a bad value is a 400 that
names the parameter (a ValueError, see gateway.errors) rather than a generic one.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select

from gateway.db.models import RequestRecord
from gateway.domain.audit.entry import to_utc
from gateway.domain.params import optional_uuid

_PLUS_AS_SPACE = re.compile(r"(T[\d:.]+) (\d{2}:?\d{2})$")
_ACTION = re.compile(r"^[a-z_]+(\.[a-z_]+)*(\.\*)?$")
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100
MAX_SEQ = 2**63 - 1  # seq is a BIGINT: a larger number is no record (and no cursor)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    since: datetime | None = None
    until: datetime | None = None
    department_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    api_key_id: uuid.UUID | None = None
    status: int | None = None
    request_id: str | None = None
    action: str | None = None  # exact, or "key.*" for every key action
    client_request_id: str | None = None

    @classmethod
    def parse(
        cls,
        since: str | None = None,
        until: str | None = None,
        department_id: str | None = None,
        user_id: str | None = None,
        api_key_id: str | None = None,
        status: str | None = None,
        request_id: str | None = None,
        action: str | None = None,
        client_request_id: str | None = None,
    ) -> AuditFilter:
        return cls(
            since=_datetime("since", since),
            until=_datetime("until", until),
            department_id=optional_uuid("department_id", department_id),
            user_id=optional_uuid("user_id", user_id),
            api_key_id=optional_uuid("api_key_id", api_key_id),
            status=_int("status", status, 100, 599),
            request_id=_text("request_id", request_id),
            action=_action(action),
            client_request_id=_text("client_request_id", client_request_id),
        )

    def apply(self, statement: Select[Any]) -> Select[Any]:
        r = RequestRecord
        conditions = [
            (self.since, lambda v: r.created_at >= v),
            (self.until, lambda v: r.created_at < v),
            (self.department_id, lambda v: r.department_id == v),
            (self.user_id, lambda v: r.user_id == v),
            (self.api_key_id, lambda v: r.api_key_id == v),
            (self.status, lambda v: r.status_code == v),
            (self.request_id, lambda v: r.request_id == v),
            (self.action, _action_condition),
            (self.client_request_id, lambda v: r.client_request_id == v),
        ]
        for value, condition in conditions:
            if value is not None:
                statement = statement.where(condition(value))
        return statement


def page_size(limit: str | None) -> int:
    parsed = _int("limit", limit, 1, MAX_PAGE_SIZE)
    return DEFAULT_PAGE_SIZE if parsed is None else parsed


def cursor(after: str | None) -> int | None:
    """A page's ``next_cursor`` is the seq of its last (oldest) record."""
    return _int("after", after, 1, MAX_SEQ)


def newest_first(filters: AuditFilter, after: int | None, limit: int) -> Select[Any]:
    statement = filters.apply(select(RequestRecord))
    if after is not None:
        statement = statement.where(RequestRecord.seq < after)
    return statement.order_by(RequestRecord.seq.desc()).limit(limit)


def _action(raw: str | None) -> str | None:
    if not raw:
        return None
    if not _ACTION.match(raw):
        raise ValueError(f"action: not an action such as 'key.revoke' or 'key.*': {raw!r}")
    return raw


def _action_condition(action: str) -> Any:
    if action.endswith(".*"):
        return RequestRecord.action.startswith(action[:-1], autoescape=True)
    return RequestRecord.action == action


def _datetime(name: str, raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        # An unescaped "+" in a query string arrives as a space: "...T09:00:00 01:00".
        return to_utc(datetime.fromisoformat(_PLUS_AS_SPACE.sub(r"\1+\2", raw.strip())))
    except (ValueError, OverflowError):  # OverflowError: past year 9999 once in UTC
        raise ValueError(f"{name}: not an ISO 8601 date and time: {raw!r}") from None


def _text(name: str, raw: str | None) -> str | None:
    if raw and "\x00" in raw:  # Postgres refuses NUL in text: a 500 if it got that far
        raise ValueError(f"{name}: must not contain a NUL character")
    return raw or None


def _int(name: str, raw: str | None, low: int, high: int | None) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: not an integer: {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name}: must be {bound}, got {value}")
    return value
