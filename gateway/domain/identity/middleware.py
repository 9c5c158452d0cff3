"""ASGI middleware: resolve the request's principal once, before any guard asks for it.

The rows it reads are frozen into snapshots (snapshots.py) inside the database session
that loaded them; no ORM row leaves this module in a principal.
"""

from __future__ import annotations

from collections.abc import Mapping
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING

import structlog
from litestar.types import ASGIApp, Receive, Scope, Send
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import Department, User
from gateway.domain.identity.principal import SESSION_COOKIE, Principal
from gateway.domain.identity.snapshots import KeySnapshot, department_snapshot
from gateway.domain.keys import tokens
from gateway.domain.keys.service import KeyService
from gateway.domain.users.service import to_read

if TYPE_CHECKING:
    from gateway.state import GatewayState

PRINCIPAL_KEY = "principal"
# What reaching a database that is down raises (asyncpg's refusals are plain OSErrors).
DATABASE_DOWN = (OSError, DBAPIError, TimeoutError)
log = structlog.get_logger("gateway.identity")


def principal_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state: GatewayState = scope["litestar_app"].state.gateway
            principal = await principal_of(state, dict(scope["headers"]))
            scope.setdefault("state", {})[PRINCIPAL_KEY] = principal
        await app(scope, receive, send)

    return middleware


async def principal_of(state: GatewayState, headers: Mapping[bytes, bytes]) -> Principal:
    """Who sent a request with these headers: its API key, else its session cookie."""
    return await resolve_principal(
        state,
        headers.get(b"authorization", b"").decode("latin-1"),
        headers.get(b"cookie", b"").decode("latin-1"),
    )


async def resolve_principal(state: GatewayState, authorization: str, cookie: str) -> Principal:
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() == "bearer" and credential:
        return await _key_principal(state, credential.strip())
    session_id = _cookie_value(cookie, SESSION_COOKIE)
    if not session_id:
        return Principal()
    session = await state.sessions.load(session_id)
    if session is None:
        return Principal()
    async with state.db() as db:
        user = await db.get(User, session.user_id)
        if user is None or not user.is_active:
            return Principal()
        department = await _department_of(db, user, state.settings.default_department)
        return Principal(
            user=to_read(user),
            session_id=session_id,
            session=session,
            department=department_snapshot(department),
        )


async def _department_of(db: AsyncSession, user: User, default_slug: str) -> Department | None:
    """The user's department; for a user without one, ``ENCLAVE_DEFAULT_DEPARTMENT``'s."""
    if user.department_id is not None:
        return await db.get(Department, user.department_id)
    if not default_slug:
        return None  # the API refuses such a user (no_department)
    found = await db.scalar(select(Department).where(Department.slug == default_slug))
    if found is None:
        # Refused like a user without a department; the log says what to fix.
        log.error("ENCLAVE_DEFAULT_DEPARTMENT names no department", slug=default_slug)
    return found


async def _key_principal(state: GatewayState, credential: str) -> Principal:
    if not tokens.looks_like_key(credential):
        return Principal()
    digest = tokens.hash_key(state.secret_key, credential)
    if state.key_snapshots.is_dead(digest):  # seen revoked, expired or unknown: final
        return Principal()
    generation = await state.generation.current()
    reused = state.key_snapshots.fresh(digest, generation)
    if reused is not None:
        return Principal(api_key=reused[0], department=reused[1])
    try:
        async with state.db.begin() as db:
            row = await KeyService(db, state.secret_key).authenticate(credential)
            if row is None:
                state.key_snapshots.forget(digest)
                return Principal()
            key = KeySnapshot.of(row)
            department = department_snapshot(await db.get(Department, row.department_id))
    except DATABASE_DOWN as exc:
        snapshot = state.key_snapshots.during_outage(digest, generation)
        if snapshot is None:
            raise ConnectionError("the database cannot be reached; try again shortly") from exc
        log.warning("database down: API key from its last good lookup", error=repr(exc))
        return Principal(api_key=snapshot[0], department=snapshot[1])
    state.key_snapshots.put(digest, key, department, generation)
    return Principal(api_key=key, department=department)


def _cookie_value(header: str, name: str) -> str:
    if not header:
        return ""
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header)
    except Exception:  # a malformed Cookie header is the client's problem, not a 500
        return ""
    morsel = cookies.get(name)
    return morsel.value if morsel else ""
