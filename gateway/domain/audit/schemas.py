from __future__ import annotations

import uuid
from datetime import datetime

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
    hash: str


class RecordDetail(RecordRead):
    prev_hash: str
    prompt_body: str | None
    response_body: str | None


LISTED_FIELDS = tuple(RecordRead.__struct_fields__)


def to_read(record: RequestRecord) -> RecordRead:
    values = {name: getattr(record, name) for name in LISTED_FIELDS}
    values["created_at"] = to_utc(record.created_at)
    return RecordRead(**values)


def to_detail(record: RequestRecord) -> RecordDetail:
    values = {name: getattr(record, name) for name in RecordDetail.__struct_fields__}
    values["created_at"] = to_utc(record.created_at)
    return RecordDetail(**values)
