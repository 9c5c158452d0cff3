"""The work behind `enclave migrate` and `enclave admin ...`, each in its own transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from msgspec import UNSET, UnsetType
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config_generation import bump_for
from gateway.db import migrate
from gateway.db.engine import create_engine, session_factory
from gateway.domain.departments.schemas import DepartmentCreate, DepartmentRead, DepartmentUpdate
from gateway.domain.departments.service import DepartmentService
from gateway.domain.departments.service import to_read as department_read
from gateway.domain.identity.passwords import password_hasher
from gateway.domain.keys.schemas import KeyCreate, KeyRead
from gateway.domain.keys.service import KeyService, expiry_from_days
from gateway.domain.users.service import UserService
from gateway.secret_store import resolve_secret_key
from gateway.settings import Settings

DEFAULT_ADMIN_EMAIL = "admin@enclave.local"


@asynccontextmanager
async def transaction(settings: Settings) -> AsyncIterator[AsyncSession]:
    engine = create_engine(settings.effective_database_url)
    try:
        async with session_factory(engine).begin() as db:
            yield db
    finally:
        await engine.dispose()
    # Committed: a running gateway reads keys and departments afresh on its next request.
    await bump_for(settings.redis_url, settings.data_dir)


def migrate_database(settings: Settings) -> None:
    migrate.upgrade(settings.effective_database_url)


async def create_admin(settings: Settings, email: str) -> str:
    async with transaction(settings) as db:
        return await UserService(db).create_local_admin(password_hasher(), email)


async def first_start_admin(settings: Settings) -> str | None:
    """The embedded default's first start: a break-glass admin if there is none yet."""
    async with transaction(settings) as db:
        users = UserService(db)
        if await users.has_local_admin():
            return None
        return await users.create_local_admin(password_hasher(), DEFAULT_ADMIN_EMAIL)


async def create_department(settings: Settings, name: str, slug: str) -> str:
    async with transaction(settings) as db:
        row = await DepartmentService(db).create(DepartmentCreate(name=name, slug=slug))
        return str(row.id)


async def set_quota(
    settings: Settings,
    slug: str,
    monthly_token_quota: int | UnsetType | None = UNSET,
    requests_per_minute: int | UnsetType | None = UNSET,
    *,
    daily_token_quota: int | UnsetType | None = UNSET,
    tokens_per_minute: int | UnsetType | None = UNSET,
    concurrent_requests: int | UnsetType | None = UNSET,
    audit_bodies: bool | UnsetType = UNSET,
) -> DepartmentRead:
    """Change the limits given (None lifts one); those left out keep their value."""
    async with transaction(settings) as db:
        service = DepartmentService(db)
        row = await service.by_slug(slug)
        update = DepartmentUpdate(
            monthly_token_quota=monthly_token_quota,
            requests_per_minute=requests_per_minute,
            daily_token_quota=daily_token_quota,
            tokens_per_minute=tokens_per_minute,
            concurrent_requests=concurrent_requests,
            audit_bodies=audit_bodies,
        )
        return department_read(await service.update(row.id, update))


async def create_key(
    settings: Settings, slug: str, name: str, models: list[str] | None, expires_days: int | None
) -> str:
    async with transaction(settings) as db:
        department = await DepartmentService(db).by_slug(slug)
        data = KeyCreate(department.id, name, models, expiry_from_days(expires_days))
        key, _ = await KeyService(db, resolve_secret_key(settings)).create(data)
        return key


async def list_keys(settings: Settings, slug: str | None) -> list[KeyRead]:
    """Every key (of one department), a page at a time so no query loads the whole table."""
    async with transaction(settings) as db:
        department_id = (await DepartmentService(db).by_slug(slug)).id if slug else None
        service = KeyService(db, resolve_secret_key(settings))
        keys: list[KeyRead] = []
        cursor: str | None = None
        while True:
            page = await service.list_page(cursor, 200, department_id)
            keys.extend(page.items)
            if page.next_cursor is None:
                return keys
            cursor = page.next_cursor
