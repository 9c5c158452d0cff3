"""The outermost ASGI layer: bearer auth, X-Request-Id echo, one access-log line a request.

It wraps the whole Litestar app (not a route), so that error responses rendered by
Litestar's exception handling carry the request id too.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opentelemetry import trace

from inference.server.auth import is_authorized, needs_auth
from inference.server.errors import error_body
from inference.server.tracing import caller_context, tracer_for

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("inference.server")
REQUEST_ID = b"x-request-id"
TENANT = b"x-enclave-tenant"


class WorkerMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.app = app
        self.api_key = api_key
        self.tracer = tracer_for(tracer_provider)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # No route takes a WebSocket; refuse one before the router sees it, token or not.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        request_id = headers.get(REQUEST_ID, b"").decode("latin-1")[:200] or uuid.uuid4().hex
        started = time.monotonic()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (REQUEST_ID, request_id.encode()),
                ]
            await send(message)

        span = self.tracer.start_span(
            f"{scope['method']} {scope['path']}",
            context=caller_context(headers),
            kind=trace.SpanKind.SERVER,
            attributes={"http.route": scope["path"], "enclave.request_id": request_id},
        )
        try:
            refused = (
                self.api_key is not None
                and needs_auth(scope["path"])
                and not is_authorized(scope["headers"], self.api_key)
            )
            if refused:
                await _send_401(send_with_id)
                return
            with trace.use_span(span, end_on_exit=False):
                await self.app(scope, receive, send_with_id)
        finally:
            span.set_attribute("http.status_code", status)
            span.end()
            # Never the prompt, the key or the Authorization header.
            log.info(
                "%s %s %d %.1fms request_id=%s tenant=%s traceparent=%s",
                scope["method"],
                scope["path"],
                status,
                (time.monotonic() - started) * 1000,
                request_id,
                headers.get(TENANT, b"default").decode("latin-1")[:128],
                headers.get(b"traceparent", b"-").decode("latin-1")[:128],
            )


async def _send_401(send: Send) -> None:
    body = error_body(
        "Missing or invalid API key: send it as 'Authorization: Bearer <key>'",
        401,
        code="invalid_api_key",
    )
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
