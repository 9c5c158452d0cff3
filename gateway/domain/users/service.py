"""Users: listing and admin changes, and the local break-glass admin account."""

from __future__ import annotations

import asyncio
import uuid

import msgspec
from argon2 import PasswordHasher
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import as_utc, utc_now
from gateway.db.models import Department, User
from gateway.domain.identity.passwords import generate_password, verify_password
from gateway.domain.pagination import Page, make_page, page_query
from gateway.domain.users.schemas import UserRead, UserUpdate
from gateway.errors import NotFoundError

LOCAL_PREFIX = "local|"


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

    async def list_page(self, after: str | None, limit: int) -> Page[UserRead]:
        rows = (await self.db.scalars(page_query(select(User), User.id, after, limit))).all()
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
