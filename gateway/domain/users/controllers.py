"""`/api/admin/users`: list, change department or role, deactivate."""

from __future__ import annotations

import uuid

from litestar import Controller, Request, get, patch
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.audit.events import record_admin_action
from gateway.domain.identity.guards import require_admin
from gateway.domain.pagination import Page
from gateway.domain.users.schemas import Role, UserRead, UserUpdate
from gateway.domain.users.service import UserFilter, UserService, to_read


class UserController(Controller):
    path = "/api/admin/users"
    guards = [require_admin]  # noqa: RUF012

    @get("/")
    async def list_users(
        self,
        db: NamedDependency[AsyncSession],
        after: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
        q: FromQuery[str | None] = None,
        department_id: FromQuery[uuid.UUID | None] = None,
        role: FromQuery[Role | None] = None,
        is_active: FromQuery[bool | None] = None,
    ) -> Page[UserRead]:
        """Users by id; ``q`` matches a substring of the email or name, in any case."""
        filters = UserFilter(q, department_id, role, is_active)
        return await UserService(db).list_page(after, limit, filters)

    @patch("/{user_id:uuid}")
    async def update_user(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        user_id: FromPath[uuid.UUID],
        data: JSONBody[UserUpdate],
    ) -> UserRead:
        service = UserService(db)
        before = to_read(await service.get(user_id))
        after = to_read(await service.update(user_id, data))
        record_admin_action(request, "user.update", "user", user_id, before, after)
        return after
