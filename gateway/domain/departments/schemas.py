from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

import msgspec

from gateway.domain.fields import GroupName, Int32, Int64, ModelName, Name

SLUG_PATTERN = "^[a-z0-9][a-z0-9-]{0,99}$"
# In the structs, so that the OpenAPI document says what the service checks too.
Slug = Annotated[str, msgspec.Meta(pattern=SLUG_PATTERN)]
SchedulingWeight = Annotated[int, msgspec.Meta(ge=1, le=1000)]


class DepartmentCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    slug: Slug
    # Limits and quotas: None is unlimited; see docs/limits.md.
    monthly_token_quota: Int64 | None = None
    requests_per_minute: Int32 | None = None
    daily_token_quota: Int64 | None = None
    tokens_per_minute: Int64 | None = None
    concurrent_requests: Int32 | None = None
    audit_bodies: bool = False
    allowed_models: list[ModelName] | None = None
    scheduling_weight: SchedulingWeight = 1


class DepartmentUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """Only the fields present are changed; send null to lift a quota."""

    name: Name | msgspec.UnsetType = msgspec.UNSET
    monthly_token_quota: Int64 | msgspec.UnsetType | None = msgspec.UNSET
    requests_per_minute: Int32 | msgspec.UnsetType | None = msgspec.UNSET
    daily_token_quota: Int64 | msgspec.UnsetType | None = msgspec.UNSET
    tokens_per_minute: Int64 | msgspec.UnsetType | None = msgspec.UNSET
    concurrent_requests: Int32 | msgspec.UnsetType | None = msgspec.UNSET
    audit_bodies: bool | msgspec.UnsetType = msgspec.UNSET
    allowed_models: list[ModelName] | msgspec.UnsetType | None = msgspec.UNSET
    scheduling_weight: SchedulingWeight | msgspec.UnsetType = msgspec.UNSET


class DepartmentRead(msgspec.Struct):
    id: uuid.UUID
    name: str
    slug: Slug
    monthly_token_quota: int | None
    requests_per_minute: int | None
    allowed_models: list[str] | None
    scheduling_weight: int
    created_at: datetime
    daily_token_quota: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    audit_bodies: bool = False


class GroupMappingCreate(msgspec.Struct, forbid_unknown_fields=True):
    group: GroupName
    department_id: uuid.UUID


class GroupMappingRead(msgspec.Struct):
    id: uuid.UUID
    group: str
    department_id: uuid.UUID
