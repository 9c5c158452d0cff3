"""`/api/admin/keys`: create (shown once), list, change limits, revoke, rotate."""

from __future__ import annotations

import uuid

from litestar import Controller, Request, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.audit.events import record_admin_action
from gateway.domain.identity.guards import require_admin
from gateway.domain.identity.principal import Principal
from gateway.domain.keys.schemas import KeyCreate, KeyCreated, KeyRead, KeyRotate, KeyUpdate
from gateway.domain.keys.service import KeyService, to_read
from gateway.domain.pagination import Page
from gateway.state import GatewayState


def _actor(principal: Principal) -> uuid.UUID | None:
    return principal.user.id if principal.user else None


class KeyController(Controller):
    path = "/api/admin/keys"
    guards = [require_admin]  # noqa: RUF012

    @get("/")
    async def list_keys(
        self,
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
        after: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
        department_id: FromQuery[uuid.UUID | None] = None,
        q: FromQuery[str | None] = None,
    ) -> Page[KeyRead]:
        """Keys by id; ``q`` matches a substring of the name or display prefix, any case."""
        service = KeyService(db, gateway.secret_key)
        return await service.list_page(after, limit, department_id, q)

    @post("/")
    async def create_key(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
        principal: NamedDependency[Principal],
        data: JSONBody[KeyCreate],
    ) -> KeyCreated:
        key, row = await KeyService(db, gateway.secret_key).create(data, _actor(principal))
        record_admin_action(request, "key.create", "api_key", row.id, None, to_read(row))
        return KeyCreated(key, to_read(row))

    @patch("/{key_id:uuid}")
    async def update_key(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
        key_id: FromPath[uuid.UUID],
        data: JSONBody[KeyUpdate],
    ) -> KeyRead:
        service = KeyService(db, gateway.secret_key)
        before = to_read(await service.get(key_id))
        after = to_read(await service.update(key_id, data))
        record_admin_action(request, "key.update", "api_key", key_id, before, after)
        return after

    @post("/{key_id:uuid}/revoke", status_code=200)
    async def revoke_key(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
        key_id: FromPath[uuid.UUID],
    ) -> KeyRead:
        service = KeyService(db, gateway.secret_key)
        before = to_read(await service.get(key_id))
        after = to_read(await service.revoke(key_id))
        record_admin_action(request, "key.revoke", "api_key", key_id, before, after)
        return after

    @post("/{key_id:uuid}/rotate", status_code=201)
    async def rotate_key(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        gateway: NamedDependency[GatewayState],
        principal: NamedDependency[Principal],
        key_id: FromPath[uuid.UUID],
        data: JSONBody[KeyRotate],
    ) -> KeyCreated:
        service = KeyService(db, gateway.secret_key)
        before = to_read(await service.get(key_id))
        key, row = await service.rotate(key_id, data.grace_seconds, _actor(principal))
        after = to_read(await service.get(key_id))
        record_admin_action(
            request, "key.rotate", "api_key", key_id, before, after, new_key_id=str(row.id)
        )
        return KeyCreated(key, to_read(row))
