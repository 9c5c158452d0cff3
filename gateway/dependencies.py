"""Dependencies every controller can ask for: a database transaction, the gateway state."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from litestar import Request
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.audit.events import submit_pending
from gateway.domain.identity.guards import SAFE_METHODS, principal_of
from gateway.domain.identity.principal import Principal
from gateway.state import GatewayState


def provide_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


async def provide_db(request: Request) -> AsyncGenerator[AsyncSession, None]:
    """One transaction per request: committed when the handler returns, rolled back if it raises.

    A write under /api/admin moves the config generation once it has committed, so cached
    key and department lookups are read afresh by the next request (on every replica).
    Admin actions the handler recorded go to the audit log then too, and only then.
    """
    state = provide_state(request)
    async with state.db.begin() as db:
        yield db
    submit_pending(request, state.audit)
    if request.method not in SAFE_METHODS and request.url.path.startswith("/api/admin/"):
        await state.generation.bump()


def provide_principal(request: Request) -> Principal:
    return principal_of(request)
