"""`/api/admin/departments` and `/api/admin/group-mappings`."""

from __future__ import annotations

import uuid

from litestar import Controller, Request, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.audit.events import record_admin_action
from gateway.domain.departments.schemas import (
    DepartmentCreate,
    DepartmentRead,
    DepartmentUpdate,
    GroupMappingCreate,
    GroupMappingRead,
)
from gateway.domain.departments.service import DepartmentService, to_read
from gateway.domain.identity.guards import require_admin
from gateway.domain.pagination import Page


class DepartmentController(Controller):
    path = "/api/admin/departments"
    guards = [require_admin]  # noqa: RUF012  (Litestar reads it as a class attribute)

    @get("/")
    async def list_departments(
        self,
        db: NamedDependency[AsyncSession],
        after: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
        q: FromQuery[str | None] = None,
    ) -> Page[DepartmentRead]:
        """Departments by id; ``q`` matches a substring of the name or slug, in any case."""
        return await DepartmentService(db).list_page(after, limit, q)

    @post("/")
    async def create_department(
        self, request: Request, db: NamedDependency[AsyncSession], data: JSONBody[DepartmentCreate]
    ) -> DepartmentRead:
        created = to_read(await DepartmentService(db).create(data))
        record_admin_action(request, "department.create", "department", created.id, None, created)
        return created

    @get("/{department_id:uuid}")
    async def get_department(
        self, db: NamedDependency[AsyncSession], department_id: FromPath[uuid.UUID]
    ) -> DepartmentRead:
        return to_read(await DepartmentService(db).get(department_id))

    @patch("/{department_id:uuid}")
    async def update_department(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        department_id: FromPath[uuid.UUID],
        data: JSONBody[DepartmentUpdate],
    ) -> DepartmentRead:
        service = DepartmentService(db)
        before = to_read(await service.get(department_id))
        after = to_read(await service.update(department_id, data))
        record_admin_action(
            request, "department.update", "department", department_id, before, after
        )
        return after


class GroupMappingController(Controller):
    path = "/api/admin/group-mappings"
    guards = [require_admin]  # noqa: RUF012

    @get("/")
    async def list_mappings(
        self,
        db: NamedDependency[AsyncSession],
        after: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
    ) -> Page[GroupMappingRead]:
        return await DepartmentService(db).list_mappings(after, limit)

    @post("/")
    async def create_mapping(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        data: JSONBody[GroupMappingCreate],
    ) -> GroupMappingRead:
        row = await DepartmentService(db).map_group(data)
        created = GroupMappingRead(row.id, row.group, row.department_id)
        record_admin_action(request, "group_mapping.create", "group_mapping", row.id, None, created)
        return created

    @delete("/{mapping_id:uuid}")
    async def delete_mapping(
        self, request: Request, db: NamedDependency[AsyncSession], mapping_id: FromPath[uuid.UUID]
    ) -> None:
        removed = await DepartmentService(db).unmap_group(mapping_id)
        record_admin_action(request, "group_mapping.delete", "group_mapping", mapping_id, removed)
