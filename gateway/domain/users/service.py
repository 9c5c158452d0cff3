"""Users: listing and admin changes, and the local break-glass admin account."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import msgspec
from argon2 import PasswordHasher
from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import as_utc, utc_now
from gateway.db.models import Department, User
from gateway.db.models.user import ROLES
from gateway.domain.identity.passwords import generate_password, verify_password
from gateway.domain.pagination import Page, make_page, page_query
from gateway.domain.search_filter import matching
from gateway.domain.users.schemas import UserRead, UserUpdate
from gateway.errors import NotFoundError

LOCAL_PREFIX = "local|"


@dataclass(frozen=True)
class UserFilter:
    """What the admin's user list may be narrowed to; every field optional."""

    q: str | None = None  # a substring of the email or the name, any case
    department_id: uuid.UUID | None = None
    role: str | None = None
    is_active: bool | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        found = [matching(self.q, User.email, User.name)]
        if self.department_id is not None:
            found.append(User.department_id == self.department_id)
        if self.role is not None:
            if self.role not in ROLES:
                raise ValueError(f"role must be one of {', '.join(ROLES)}")
            found.append(User.role == self.role)
        if self.is_active is not None:
            found.append(User.is_active == self.is_active)
        return [c for c in found if c is not None]


def to_read(row: User) -> UserRead:
    last = as_utc(row.last_login_at) if row.last_login_at else None
    return UserRead(row.id, row.email, row.name, row.department_id, row.role, row.is_active, last)


class UserService:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def get(self, user_id: uuid.UUID) -> User:
        row = await self.db.get(User, user_id)
        if row is None:
            raise NotFoundError("no such user")
        return row

    async def list_page(
        self, after: str | None, limit: int, filters: UserFilter | None = None
    ) -> Page[UserRead]:
        statement = select(User)
        for condition in (filters or UserFilter()).conditions():
            statement = statement.where(condition)
        rows = (await self.db.scalars(page_query(statement, User.id, after, limit))).all()
        return make_page(list(rows), limit, to_read)

    async def update(self, user_id: uuid.UUID, data: UserUpdate) -> User:
        row = await self.get(user_id)
        changes = {k: v for k, v in msgspec.structs.asdict(data).items() if v is not msgspec.UNSET}
        department_id = changes.get("department_id")
        if department_id is not None and await self.db.get(Department, department_id) is None:
            raise NotFoundError("no such department")
        for name, value in changes.items():
            setattr(row, name, value)
        await self.db.flush()
        return row

    async def create_local_admin(self, hasher: PasswordHasher, email: str) -> str:
        """Create (or reset) the break-glass admin ``email``; returns the new password once."""
        if "@" not in email:
            raise ValueError("give an email address")
        password = generate_password()
        subject = LOCAL_PREFIX + email.lower()
        row = await self.db.scalar(select(User).where(User.subject == subject))
        if row is None:
            row = User(subject=subject, email=email.lower(), name="Break-glass admin")
            self.db.add(row)
        row.role, row.is_active, row.password_hash = "admin", True, hasher.hash(password)
        await self.db.flush()
        return password

    async def has_local_admin(self) -> bool:
        statement = select(User.id).where(User.subject.startswith(LOCAL_PREFIX)).limit(1)
        return await self.db.scalar(statement) is not None

    async def check_local_login(self, hasher: PasswordHasher, email: str, password: str) -> User:
        subject = LOCAL_PREFIX + email.strip().lower()
        row = await self.db.scalar(select(User).where(User.subject == subject))
        stored = row.password_hash if row is not None and row.is_active else None
        # Always one argon2 run (a missing account answers as slowly as a wrong password),
        # and off the event loop: each run takes a core for a tenth of a second.
        matches = await asyncio.to_thread(verify_password, hasher, stored, password)
        if row is None or not matches:
            raise PermissionError("wrong email or password")
        row.last_login_at = utc_now()
        return row
