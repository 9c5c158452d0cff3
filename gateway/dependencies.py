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


# Admin writes that can change which assistants are active, and POSTs there that only read.
ASSISTANT_OWNERS = ("/api/admin/assistants", "/api/admin/departments")
READ_ONLY_POSTS = ("/tokens", "/extract")


async def provide_db(request: Request) -> AsyncGenerator[AsyncSession, None]:
    """One transaction per request: committed when the handler returns, rolled back if it raises.

    A write under /api/admin moves the config generation once it has committed, so cached
    key and department lookups are read afresh by the next request (on every replica).
    Admin actions the handler recorded go to the audit log then too, and only then. A write
    to assistants (or departments, which own them) re-reads this process's assistants and
    asks the prefix warmer for a sync, after the commit, so the sync sees the change.
    """
    state = provide_state(request)
    async with state.db.begin() as db:
        yield db
    submit_pending(request, state.audit)
    path = request.url.path
    if request.method not in SAFE_METHODS and path.startswith("/api/admin/"):
        await state.generation.bump()
        if path.startswith(ASSISTANT_OWNERS) and not path.endswith(READ_ONLY_POSTS):
            state.assistants.invalidate()
            state.warmer.request_sync()


def provide_principal(request: Request) -> Principal:
    return principal_of(request)
