from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

import msgspec

from gateway.domain.fields import Int32, Int64, ModelName, Name


class KeyCreate(msgspec.Struct, forbid_unknown_fields=True):
    department_id: uuid.UUID
    name: Name
    allowed_models: list[ModelName] | None = None
    expires_at: datetime | None = None
    # The key's own limits, on top of its department's; None is no limit of its own.
    requests_per_minute: Int32 | None = None
    tokens_per_minute: Int64 | None = None
    concurrent_requests: Int32 | None = None
    daily_token_quota: Int64 | None = None
    monthly_token_quota: Int64 | None = None


class KeyUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """A key's limits: only the fields present change; null lifts one. Applies to the next
    request."""

    requests_per_minute: Int32 | msgspec.UnsetType | None = msgspec.UNSET
    tokens_per_minute: Int64 | msgspec.UnsetType | None = msgspec.UNSET
    concurrent_requests: Int32 | msgspec.UnsetType | None = msgspec.UNSET
    daily_token_quota: Int64 | msgspec.UnsetType | None = msgspec.UNSET
    monthly_token_quota: Int64 | msgspec.UnsetType | None = msgspec.UNSET


class KeyRotate(msgspec.Struct, forbid_unknown_fields=True):
    # How long the old key keeps working after rotation; 0 ends it now. At most 30 days.
    grace_seconds: Annotated[int, msgspec.Meta(ge=0, le=30 * 86400)] = 0


class KeyRead(msgspec.Struct):
    id: uuid.UUID
    department_id: uuid.UUID
    name: str
    display_prefix: str
    allowed_models: list[str] | None
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    created_at: datetime
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    daily_token_quota: int | None = None
    monthly_token_quota: int | None = None


class KeyCreated(msgspec.Struct):
    """The one response that carries the key itself; it is not stored anywhere readable."""

    key: str
    api_key: KeyRead
