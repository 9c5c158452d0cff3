from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import msgspec

from gateway.db.models import RequestRecord
from gateway.domain.audit.entry import to_utc


class RecordRead(msgspec.Struct):
    """One record as the admin API lists it; the bodies only come with a single record."""

    seq: int
    created_at: datetime
    request_id: str
    status_code: int
    endpoint: str
    model: str
    user_id: uuid.UUID | None
    user_email: str
    api_key_id: uuid.UUID | None
    department_id: uuid.UUID | None
    department_slug: str
    streamed: bool
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_ms: float | None
    latency_ms: float
    client_ip: str
    user_agent: str
    upstream: str
    reason: str
    error: str
    action: str
    target_type: str
    target_id: str
    # What an admin action changed: {"before": {...}, "after": {...}}; null for requests.
    details: dict[str, Any] | None
    client_request_id: str
    hash: str


class RecordDetail(RecordRead):
    prev_hash: str
    prompt_body: str | None
    response_body: str | None


LISTED_FIELDS = tuple(RecordRead.__struct_fields__)


def to_read(record: RequestRecord) -> RecordRead:
    return RecordRead(**_values(record, LISTED_FIELDS))


def to_detail(record: RequestRecord) -> RecordDetail:
    return RecordDetail(**_values(record, RecordDetail.__struct_fields__))


def _values(record: RequestRecord, names: tuple[str, ...]) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in names}
    values["created_at"] = to_utc(record.created_at)
    values["details"] = json.loads(record.details) if record.details else None
    return values
