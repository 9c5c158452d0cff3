"""Create, list, revoke, rotate and authenticate API keys."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import msgspec
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import as_utc, utc_now
from gateway.db.models import ApiKey, Department
from gateway.domain.keys import tokens
from gateway.domain.keys.schemas import KeyCreate, KeyRead, KeyUpdate
from gateway.domain.limits.validation import LIMIT_FIELDS, check_limit_values
from gateway.domain.pagination import Page, make_page, page_query
from gateway.domain.search_filter import matching
from gateway.errors import NotFoundError

# last_used_at is written at most this often per key, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def to_read(key: ApiKey) -> KeyRead:
    return KeyRead(
        id=key.id,
        department_id=key.department_id,
        name=key.name,
        display_prefix=key.display_prefix,
        allowed_models=key.allowed_models,
        expires_at=key.expires_at and as_utc(key.expires_at),
        revoked_at=key.revoked_at and as_utc(key.revoked_at),
        last_used_at=key.last_used_at and as_utc(key.last_used_at),
        created_at=as_utc(key.created_at),
        **{name: getattr(key, name) for name in LIMIT_FIELDS},
    )


class KeyService:
    def __init__(self, db: AsyncSession, secret_key: str) -> None:
        self.db = db
        self.secret_key = secret_key

    async def create(
        self,
        data: KeyCreate,
        created_by: uuid.UUID | None = None,
        rotated_from: uuid.UUID | None = None,
    ) -> tuple[str, ApiKey]:
        if not data.name.strip():
            raise ValueError("name must not be empty")
        check_limit_values(msgspec.structs.asdict(data))
        if await self.db.get(Department, data.department_id) is None:
            raise NotFoundError("no such department")
        key = tokens.generate_key()
        row = ApiKey(
            department_id=data.department_id,
            name=data.name.strip(),
            key_hash=tokens.hash_key(self.secret_key, key),
            display_prefix=tokens.display_prefix(key),
            allowed_models=data.allowed_models,
            expires_at=data.expires_at,
            created_by_id=created_by,
            rotated_from_id=rotated_from,
            **{name: getattr(data, name) for name in LIMIT_FIELDS},
        )
        self.db.add(row)
        await self.db.flush()
        return key, row

    async def get(self, key_id: uuid.UUID) -> ApiKey:
        row = await self.db.get(ApiKey, key_id)
        if row is None:
            raise NotFoundError("no such API key")
        return row

    async def update(self, key_id: uuid.UUID, data: KeyUpdate) -> ApiKey:
        """Change a key's limits; the limiter reads them afresh on the key's next request."""
        row = await self.get(key_id)
        changes = {k: v for k, v in msgspec.structs.asdict(data).items() if v is not msgspec.UNSET}
        check_limit_values(changes)
        for name, value in changes.items():
            setattr(row, name, value)
        await self.db.flush()
        return row

    async def list_page(
        self,
        after: str | None,
        limit: int,
        department_id: uuid.UUID | None = None,
        q: str | None = None,
    ) -> Page[KeyRead]:
        statement = select(ApiKey)
        if department_id is not None:
            statement = statement.where(ApiKey.department_id == department_id)
        condition = matching(q, ApiKey.name, ApiKey.display_prefix)
        if condition is not None:
            statement = statement.where(condition)
        rows = (await self.db.scalars(page_query(statement, ApiKey.id, after, limit))).all()
        return make_page(list(rows), limit, to_read)

    async def revoke(self, key_id: uuid.UUID) -> ApiKey:
        row = await self.get(key_id)
        row.revoked_at = row.revoked_at or utc_now()
        await self.db.flush()
        return row

    async def rotate(
        self, key_id: uuid.UUID, grace_seconds: int, by: uuid.UUID | None
    ) -> tuple[str, ApiKey]:
        """A new key like the old one; the old one stops working after the grace period."""
        if not 0 <= grace_seconds <= 30 * 86400:
            raise ValueError("grace_seconds must be between 0 and 30 days")
        old = await self.get(key_id)
        if old.revoked_at is not None:
            raise ValueError("a revoked key cannot be rotated")
        limits = {name: getattr(old, name) for name in LIMIT_FIELDS}  # the new key keeps them
        data = KeyCreate(old.department_id, old.name, old.allowed_models, old.expires_at, **limits)
        key, new = await self.create(data, created_by=by, rotated_from=old.id)
        ends = utc_now() + timedelta(seconds=grace_seconds)
        old.expires_at = ends if old.expires_at is None else min(as_utc(old.expires_at), ends)
        await self.db.flush()
        return key, new

    async def authenticate(self, presented: str) -> ApiKey | None:
        """The live key matching ``presented``, or None. Records when it was last used."""
        if not tokens.looks_like_key(presented):
            return None
        digest = tokens.hash_key(self.secret_key, presented)
        row = await self.db.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
        now = utc_now()
        if row is None or row.revoked_at is not None:
            return None
        if row.expires_at is not None and as_utc(row.expires_at) <= now:
            return None
        if row.last_used_at is None or now - as_utc(row.last_used_at) > LAST_USED_RESOLUTION:
            await self.db.execute(
                update(ApiKey).where(ApiKey.id == row.id).values(last_used_at=now)
            )
            row.last_used_at = now
        return row


def expiry_from_days(days: int | None) -> datetime | None:
    if days is None:
        return None
    if days < 1:
        raise ValueError("expiry must be at least one day")
    return utc_now() + timedelta(days=days)
