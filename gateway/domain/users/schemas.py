from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

import msgspec

Role = Literal["admin", "member"]


class UserUpdate(msgspec.Struct, forbid_unknown_fields=True):
    department_id: uuid.UUID | msgspec.UnsetType | None = msgspec.UNSET
    role: Role | msgspec.UnsetType = msgspec.UNSET
    is_active: bool | msgspec.UnsetType = msgspec.UNSET


class UserRead(msgspec.Struct, frozen=True):
    """A user as the admin API and /api/me show it; also the signed-in principal's frozen
    copy of its user row (identity/principal.py)."""

    id: uuid.UUID
    email: str
    name: str
    department_id: uuid.UUID | None
    role: str
    is_active: bool
    last_login_at: datetime | None


class MeRead(msgspec.Struct):
    """Who the caller is: a user (session) or an API key, with the department's quota.

    What is left of the quota is `/api/me/usage`'s: it reads the limits store (Redis),
    which this must not need, since a UI learns its CSRF token here."""

    kind: Literal["user", "api_key"]
    user: UserRead | None
    api_key_name: str | None
    department: str | None
    monthly_token_quota: int | None
    csrf_token: str | None
