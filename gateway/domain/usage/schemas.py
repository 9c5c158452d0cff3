"""What `/api/admin/usage` answers: msgspec Structs, so the OpenAPI document (and the web
app's typed client generated from it) names every field."""

from __future__ import annotations

import uuid
from datetime import date
from typing import Literal

import msgspec

Via = Literal["ui", "api"]


class DailyRow(msgspec.Struct):
    """One department's requests on one UTC day by one way in: "ui" (the web app, with a
    session) or "api" (an API key)."""

    day: date
    department_id: uuid.UUID | None
    department_slug: str  # "" when the department is gone (or the request had none)
    department_name: str
    via: Via
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # prompt tokens served from the prefix cache
    errors: int  # answered 5xx
    refusals: int  # refused by a limit (429)


class DailyUsage(msgspec.Struct):
    """``rows`` by day, then department slug, then via; days without traffic are absent."""

    since: date
    until: date  # inclusive
    rows: list[DailyRow]


class TopRow(msgspec.Struct):
    id: uuid.UUID
    label: str  # the user's email or the key's name; "" when it is gone
    department_id: uuid.UUID | None  # the key's department; for a user, where the most went
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_tokens: int  # prompt + completion


class TopUsage(msgspec.Struct):
    by: Literal["user", "key"]
    since: date
    until: date
    items: list[TopRow]  # by total_tokens, most first


class ReasonCount(msgspec.Struct):
    reason: str  # as in the audit record: "rate_limit:requests_per_minute", ...
    count: int


class RefusalCounts(msgspec.Struct):
    since: date
    until: date
    total: int
    reasons: list[ReasonCount]  # every limit, zeros too, in a fixed order
