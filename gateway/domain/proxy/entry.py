"""The OpenAI API's way in: its paths go to the proxy's raw handlers ahead of Litestar.

Litestar's router, its two exception layers and the app middleware cost a request more
than all the gateway's own steps before the worker call, and add a wrapper to every event
a stream passes through. The API needs none of what they offer (its handlers are raw ASGI
and answer every error themselves), so its requests skip them. Nothing else is skipped:
the same steps run in the same order, the request id (echoed, bound to the log context),
the principal (API key or session), then the handler, which authorizes, admits through
the limiter, forwards, and settles, audits and meters; and the canonical log line last.
Every other path goes through Litestar as before.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from litestar import Litestar
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.domain.identity.middleware import PRINCIPAL_KEY, principal_of
from gateway.domain.proxy.asgi_io import send_error
from gateway.domain.proxy.handlers import API_ROUTES, refuse_unresolved
from gateway.domain.proxy.openai_errors import ApiError
from gateway.request_context import end_request, reply_for

if TYPE_CHECKING:
    from gateway.state import GatewayState

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
log = structlog.get_logger("gateway.proxy")


def put_api_first(app: Litestar) -> None:
    """Serve the API's paths before ``app``'s router sees them."""
    rest: ASGIApp = app.asgi_handler
    state: GatewayState = app.state.gateway

    async def entry(scope: Scope, receive: Receive, send: Send) -> None:
        handler = API_ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if handler is None:
            await rest(scope, receive, send)
        else:
            await serve_api(handler, state, scope, receive, send)

    app.asgi_handler = entry


async def serve_api(
    handler: Handler, state: GatewayState, scope: Scope, receive: Receive, send: Send
) -> None:
    started = time.perf_counter()
    headers = dict(scope["headers"])
    reply = reply_for(scope, send, headers)
    try:
        try:
            principal = await principal_of(state, headers)
        except ConnectionError as exc:  # the database is down and the key was never seen
            error = ApiError(503, str(exc), reason="database_unavailable")
            await refuse_unresolved(scope, reply, error)
            return
        scope["state"][PRINCIPAL_KEY] = principal
        await handler(scope, receive, reply)
    except Exception:
        log.exception("API request failed", path=scope["path"])
        if not reply.started:
            message = "the gateway failed on this request; its log has the details"
            await send_error(reply, ApiError(500, message))
    finally:
        end_request(str(scope.get("method", "GET")), scope["path"], reply.status, started)
