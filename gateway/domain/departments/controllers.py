"""`/api/admin/departments` and `/api/admin/group-mappings`."""

from __future__ import annotations

import uuid

from litestar import Controller, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

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
    ) -> Page[DepartmentRead]:
        return await DepartmentService(db).list_page(after, limit)

    @post("/")
    async def create_department(
        self, db: NamedDependency[AsyncSession], data: JSONBody[DepartmentCreate]
    ) -> DepartmentRead:
        return to_read(await DepartmentService(db).create(data))

    @get("/{department_id:uuid}")
    async def get_department(
        self, db: NamedDependency[AsyncSession], department_id: FromPath[uuid.UUID]
    ) -> DepartmentRead:
        return to_read(await DepartmentService(db).get(department_id))

    @patch("/{department_id:uuid}")
    async def update_department(
        self,
        db: NamedDependency[AsyncSession],
        department_id: FromPath[uuid.UUID],
        data: JSONBody[DepartmentUpdate],
    ) -> DepartmentRead:
        return to_read(await DepartmentService(db).update(department_id, data))


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
        self, db: NamedDependency[AsyncSession], data: JSONBody[GroupMappingCreate]
    ) -> GroupMappingRead:
        row = await DepartmentService(db).map_group(data)
        return GroupMappingRead(row.id, row.group, row.department_id)

    @delete("/{mapping_id:uuid}")
    async def delete_mapping(
        self, db: NamedDependency[AsyncSession], mapping_id: FromPath[uuid.UUID]
    ) -> None:
        await DepartmentService(db).unmap_group(mapping_id)
