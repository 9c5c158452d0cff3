"""Server-side sessions: Redis in production, the database in the embedded default.

The cookie holds 256 random bits; both stores key the session by their SHA-256, so a
copy of the store does not let anyone sign in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from redis.asyncio import Redis
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.base import as_utc, utc_now
from gateway.db.models import LoginSession


@dataclass(frozen=True, slots=True)
class SessionData:
    user_id: uuid.UUID
    csrf_token: str
    last_seen_at: datetime
    expires_at: datetime  # the absolute end, however active the session is
    id_token: str = ""


@dataclass(frozen=True, slots=True)
class SessionLifetimes:
    idle: timedelta
    absolute: timedelta


class SessionStore(Protocol):
    async def create(self, user_id: uuid.UUID, id_token: str = "") -> tuple[str, SessionData]: ...
    async def load(self, session_id: str) -> SessionData | None: ...
    async def delete(self, session_id: str) -> None: ...


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _new(user_id: uuid.UUID, id_token: str, lifetimes: SessionLifetimes) -> SessionData:
    now = utc_now()
    return SessionData(user_id, secrets.token_urlsafe(32), now, now + lifetimes.absolute, id_token)


def _is_live(data: SessionData, lifetimes: SessionLifetimes, now: datetime) -> bool:
    return now < data.expires_at and now - data.last_seen_at < lifetimes.idle


class DatabaseSessionStore:
    def __init__(self, factory: async_sessionmaker[AsyncSession], lifetimes: SessionLifetimes):
        self.factory = factory
        self.lifetimes = lifetimes

    async def create(self, user_id: uuid.UUID, id_token: str = "") -> tuple[str, SessionData]:
        session_id, data = secrets.token_urlsafe(32), _new(user_id, id_token, self.lifetimes)
        async with self.factory.begin() as db:
            # Expired rows go here, a few at a time, rather than in a background job.
            await db.execute(delete(LoginSession).where(LoginSession.expires_at < utc_now()))
            db.add(
                LoginSession(
                    id_hash=_digest(session_id),
                    user_id=user_id,
                    csrf_token=data.csrf_token,
                    last_seen_at=data.last_seen_at,
                    expires_at=data.expires_at,
                    id_token=id_token,
                )
            )
        return session_id, data

    async def load(self, session_id: str) -> SessionData | None:
        async with self.factory.begin() as db:
            row = await db.get(LoginSession, _digest(session_id))
            if row is None:
                return None
            data = SessionData(
                row.user_id,
                row.csrf_token,
                as_utc(row.last_seen_at),
                as_utc(row.expires_at),
                row.id_token,
            )
            now = utc_now()
            if not _is_live(data, self.lifetimes, now):
                await db.delete(row)
                return None
            row.last_seen_at = now
            return data

    async def delete(self, session_id: str) -> None:
        async with self.factory.begin() as db:
            await db.execute(
                delete(LoginSession).where(LoginSession.id_hash == _digest(session_id))
            )


class RedisSessionStore:
    PREFIX = "enclave:session:"

    def __init__(self, redis: Redis, lifetimes: SessionLifetimes):
        self.redis = redis
        self.lifetimes = lifetimes

    async def create(self, user_id: uuid.UUID, id_token: str = "") -> tuple[str, SessionData]:
        session_id, data = secrets.token_urlsafe(32), _new(user_id, id_token, self.lifetimes)
        await self._save(session_id, data)
        return session_id, data

    async def load(self, session_id: str) -> SessionData | None:
        raw = await self.redis.get(self.PREFIX + _digest(session_id))
        if raw is None:
            return None
        fields = json.loads(raw)
        data = SessionData(
            uuid.UUID(fields["user_id"]),
            fields["csrf_token"],
            datetime.fromisoformat(fields["last_seen_at"]),
            datetime.fromisoformat(fields["expires_at"]),
            fields["id_token"],
        )
        now = utc_now()
        if not _is_live(data, self.lifetimes, now):
            await self.delete(session_id)
            return None
        await self._save(session_id, dataclasses.replace(data, last_seen_at=now))
        return data

    async def delete(self, session_id: str) -> None:
        await self.redis.delete(self.PREFIX + _digest(session_id))

    async def _save(self, session_id: str, data: SessionData) -> None:
        # Redis forgets the session at whichever end comes first: idle or absolute.
        ttl = min(self.lifetimes.idle, data.expires_at - data.last_seen_at)
        payload = {
            k: str(v) if not isinstance(v, datetime) else v.isoformat()
            for k, v in _as_dict(data).items()
        }
        await self.redis.set(
            self.PREFIX + _digest(session_id),
            json.dumps(payload),
            px=max(1, int(ttl.total_seconds() * 1000)),
        )


def _as_dict(data: SessionData) -> dict[str, object]:
    return {f.name: getattr(data, f.name) for f in dataclasses.fields(data)}
