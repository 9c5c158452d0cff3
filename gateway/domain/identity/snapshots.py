"""Frozen copies of the rows a request's principal stands on: its key and department.

A principal outlives the database session that loaded it: the key cache keeps it across
requests and event loops, and the proxy reads it after the session has closed. A live ORM
row there could lazy-load, be changed in place, or carry a session that is gone, so each
row is copied into one of these, with only the fields the request path reads, the moment it
leaves the database session. (The signed-in user is copied the same way, into the frozen
`UserRead` that /api/me shows.)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from gateway.db.models import ApiKey, Department
from gateway.domain.limits.types import Limits


def _models(names: list[str] | None) -> tuple[str, ...] | None:
    return tuple(names) if names is not None else None


def _limits(row: Department | ApiKey) -> Limits:
    """Departments and keys name their limit columns alike."""
    return Limits(
        requests_per_minute=row.requests_per_minute,
        tokens_per_minute=row.tokens_per_minute,
        concurrent_requests=row.concurrent_requests,
        tokens_per_day=row.daily_token_quota,
        tokens_per_month=row.monthly_token_quota,
    )


@dataclass(frozen=True, slots=True)
class DepartmentSnapshot:
    id: uuid.UUID
    slug: str
    name: str
    limits: Limits
    allowed_models: tuple[str, ...] | None  # None admits every model
    scheduling_weight: int = 1
    audit_bodies: bool = False

    @classmethod
    def of(cls, row: Department) -> DepartmentSnapshot:
        return cls(
            row.id,
            row.slug,
            row.name,
            _limits(row),
            _models(row.allowed_models),
            row.scheduling_weight,
            row.audit_bodies,
        )


def department_snapshot(row: Department | None) -> DepartmentSnapshot | None:
    return DepartmentSnapshot.of(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class KeySnapshot:
    id: uuid.UUID
    department_id: uuid.UUID
    name: str
    limits: Limits
    allowed_models: tuple[str, ...] | None  # None admits every model
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    @classmethod
    def of(cls, row: ApiKey) -> KeySnapshot:
        return cls(
            row.id,
            row.department_id,
            row.name,
            _limits(row),
            _models(row.allowed_models),
            row.expires_at,
            row.revoked_at,
        )
