"""The work behind `enclave migrate` and `enclave admin ...`, each in its own transaction.

Each change is an audit record (actor "cli") appended to the chain in the same transaction,
so the change and its record commit together.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from msgspec import UNSET, UnsetType
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config_generation import bump_for
from gateway.db import migrate
from gateway.db.engine import create_engine, session_factory
from gateway.db.models import Department, User
from gateway.domain.audit.actions import CLI, action_entry
from gateway.domain.audit.entry import AuditEntry
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.store import append_locked, lock_chain, record_head
from gateway.domain.departments.schemas import DepartmentCreate, DepartmentRead, DepartmentUpdate
from gateway.domain.departments.service import DepartmentService
from gateway.domain.departments.service import to_read as department_read
from gateway.domain.identity.passwords import password_hasher
from gateway.domain.keys.schemas import KeyCreate, KeyRead
from gateway.domain.keys.service import KeyService, expiry_from_days
from gateway.domain.keys.service import to_read as key_read
from gateway.domain.users.schemas import UserUpdate
from gateway.domain.users.service import LOCAL_PREFIX, UserService
from gateway.domain.users.service import to_read as user_read
from gateway.secret_store import resolve_secret_key
from gateway.settings import Settings

DEFAULT_ADMIN_EMAIL = "admin@enclave.local"
# The department an empty appliance starts with (name, slug): its first admin's.
FIRST_DEPARTMENT = ("General", "general")


@asynccontextmanager
async def transaction(
    settings: Settings, audit: list[AuditEntry] | None = None
) -> AsyncIterator[AsyncSession]:
    """One transaction; what the body put in ``audit`` is chained in it before it commits."""
    engine = create_engine(settings.effective_database_url)
    seal = audit_seal(settings) if audit is not None else None
    head = None
    try:
        async with session_factory(engine).begin() as db:
            yield db
            if seal is not None and audit:
                head = await append_locked(db, await lock_chain(db), audit, seal.key)
    finally:
        await engine.dispose()
    if seal is not None and head is not None:
        await record_head(seal.head_log, *head)
    # Committed: a running gateway reads keys and departments afresh on its next request.
    await bump_for(settings.redis_url, settings.data_dir)


def audit_seal(settings: Settings) -> ChainSeal:
    return ChainSeal.build(resolve_secret_key(settings), settings.audit_head_path)


def migrate_database(settings: Settings) -> None:
    migrate.upgrade(settings.effective_database_url)


async def create_admin(settings: Settings, email: str) -> str:
    audit: list[AuditEntry] = []
    async with transaction(settings, audit) as db:
        return await _create_admin(db, email, audit)


async def first_start_admin(settings: Settings) -> str | None:
    """The embedded default's first start: a break-glass admin if there is none yet. On
    an empty appliance the admin also gets a department, "General", so that whoever ran
    `make run` can chat at once (the API and chat refuse users without one)."""
    audit: list[AuditEntry] = []
    async with transaction(settings, audit) as db:
        if await UserService(db).has_local_admin():
            return None
        password = await _create_admin(db, DEFAULT_ADMIN_EMAIL, audit)
        if await db.scalar(select(Department.id).limit(1)) is None:
            await _first_department(db, audit)
        return password


async def _first_department(db: AsyncSession, audit: list[AuditEntry]) -> None:
    department = await DepartmentService(db).create(
        DepartmentCreate(name=FIRST_DEPARTMENT[0], slug=FIRST_DEPARTMENT[1])
    )
    audit.append(
        action_entry(
            CLI, "department.create", "department", department.id, None, department_read(department)
        )
    )
    admin = await db.scalar(select(User).where(User.subject == LOCAL_PREFIX + DEFAULT_ADMIN_EMAIL))
    if admin is not None:
        before = user_read(admin)
        after = await UserService(db).update(admin.id, UserUpdate(department_id=department.id))
        audit.append(action_entry(CLI, "user.update", "user", admin.id, before, user_read(after)))


async def _create_admin(db: AsyncSession, email: str, audit: list[AuditEntry]) -> str:
    """Create or reset the break-glass admin ``email`` (the password is never logged)."""
    subject = LOCAL_PREFIX + email.lower()
    existing = await db.scalar(select(User).where(User.subject == subject))
    before = user_read(existing) if existing is not None else None
    password = await UserService(db).create_local_admin(password_hasher(), email)
    row = await db.scalar(select(User).where(User.subject == subject))
    if row is not None:
        action = "user.create_admin" if before is None else "user.reset_admin"
        audit.append(action_entry(CLI, action, "user", row.id, before, user_read(row)))
    return password


async def create_department(settings: Settings, name: str, slug: str) -> str:
    audit: list[AuditEntry] = []
    async with transaction(settings, audit) as db:
        row = await DepartmentService(db).create(DepartmentCreate(name=name, slug=slug))
        created = department_read(row)
        audit.append(action_entry(CLI, "department.create", "department", row.id, None, created))
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
    audit: list[AuditEntry] = []
    async with transaction(settings, audit) as db:
        service = DepartmentService(db)
        row = await service.by_slug(slug)
        before = department_read(row)
        update = DepartmentUpdate(
            monthly_token_quota=monthly_token_quota,
            requests_per_minute=requests_per_minute,
            daily_token_quota=daily_token_quota,
            tokens_per_minute=tokens_per_minute,
            concurrent_requests=concurrent_requests,
            audit_bodies=audit_bodies,
        )
        after = department_read(await service.update(row.id, update))
        audit.append(action_entry(CLI, "department.update", "department", row.id, before, after))
        return after


async def create_key(
    settings: Settings, slug: str, name: str, models: list[str] | None, expires_days: int | None
) -> str:
    audit: list[AuditEntry] = []
    async with transaction(settings, audit) as db:
        department = await DepartmentService(db).by_slug(slug)
        data = KeyCreate(department.id, name, models, expiry_from_days(expires_days))
        key, row = await KeyService(db, resolve_secret_key(settings)).create(data)
        audit.append(action_entry(CLI, "key.create", "api_key", row.id, None, key_read(row)))
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
