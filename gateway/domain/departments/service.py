"""Departments, their quotas, and the IdP groups mapped to them."""

from __future__ import annotations

import re
import uuid

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import as_utc
from gateway.db.models import Department, GroupMapping
from gateway.domain.departments.schemas import (
    SLUG_PATTERN,
    DepartmentCreate,
    DepartmentRead,
    DepartmentUpdate,
    GroupMappingCreate,
    GroupMappingRead,
)
from gateway.domain.limits.validation import check_limit_values
from gateway.domain.pagination import Page, make_page, page_query
from gateway.domain.search_filter import matching
from gateway.errors import NotFoundError


def to_read(row: Department) -> DepartmentRead:
    return DepartmentRead(
        row.id,
        row.name,
        row.slug,
        row.monthly_token_quota,
        row.requests_per_minute,
        row.allowed_models,
        row.scheduling_weight,
        as_utc(row.created_at),
        daily_token_quota=row.daily_token_quota,
        tokens_per_minute=row.tokens_per_minute,
        concurrent_requests=row.concurrent_requests,
        audit_bodies=row.audit_bodies,
    )


def _check_limits(values: dict[str, object]) -> None:
    check_limit_values(values)
    weight = values.get("scheduling_weight")
    if isinstance(weight, int) and not 1 <= weight <= 1000:
        raise ValueError("scheduling_weight must be between 1 and 1000")


class DepartmentService:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def create(self, data: DepartmentCreate) -> Department:
        if not re.match(SLUG_PATTERN, data.slug):
            raise ValueError("slug must be lower-case letters, digits and dashes")
        if not data.name.strip():
            raise ValueError("name must not be empty")
        _check_limits(msgspec.structs.asdict(data))
        row = Department(**msgspec.structs.asdict(data))
        self.db.add(row)
        await self.db.flush()
        return row

    async def get(self, department_id: uuid.UUID) -> Department:
        row = await self.db.get(Department, department_id)
        if row is None:
            raise NotFoundError("no such department")
        return row

    async def by_slug(self, slug: str) -> Department:
        row = await self.db.scalar(select(Department).where(Department.slug == slug))
        if row is None:
            raise NotFoundError(f"no department with slug {slug!r}")
        return row

    async def update(self, department_id: uuid.UUID, data: DepartmentUpdate) -> Department:
        row = await self.get(department_id)
        changes = {k: v for k, v in msgspec.structs.asdict(data).items() if v is not msgspec.UNSET}
        _check_limits(changes)
        for name, value in changes.items():
            setattr(row, name, value)
        await self.db.flush()
        return row

    async def list_page(
        self, after: str | None, limit: int, q: str | None = None
    ) -> Page[DepartmentRead]:
        statement = select(Department)
        condition = matching(q, Department.name, Department.slug)
        if condition is not None:
            statement = statement.where(condition)
        rows = (await self.db.scalars(page_query(statement, Department.id, after, limit))).all()
        return make_page(list(rows), limit, to_read)

    async def map_group(self, data: GroupMappingCreate) -> GroupMapping:
        await self.get(data.department_id)
        row = GroupMapping(group=data.group, department_id=data.department_id)
        self.db.add(row)
        await self.db.flush()
        return row

    async def unmap_group(self, mapping_id: uuid.UUID) -> GroupMappingRead:
        """Remove a mapping; returns what it was (for the audit log)."""
        row = await self.db.get(GroupMapping, mapping_id)
        if row is None:
            raise NotFoundError("no such group mapping")
        removed = GroupMappingRead(row.id, row.group, row.department_id)
        await self.db.delete(row)
        return removed

    async def list_mappings(self, after: str | None, limit: int) -> Page[GroupMappingRead]:
        statement = page_query(select(GroupMapping), GroupMapping.id, after, limit)
        rows = (await self.db.scalars(statement)).all()
        return make_page(
            list(rows), limit, lambda m: GroupMappingRead(m.id, m.group, m.department_id)
        )
