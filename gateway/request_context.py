"""ASGI middleware: a request id per request, bound to the log context and echoed back."""

from __future__ import annotations

import re
import time
import uuid
from typing import cast

import structlog
from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
# Accept a caller's id only if it is short and plain, so it is safe to log and echo.
_VALID_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")

log = structlog.get_logger("gateway.access")


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        http_scope = cast(HTTPScope, scope)
        incoming = dict(scope["headers"]).get(REQUEST_ID_HEADER, b"")
        request_id = incoming.decode() if _VALID_ID.match(incoming) else f"req-{uuid.uuid4().hex}"
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER, request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            log.info(
                "request",
                method=http_scope["method"],
                path=http_scope["path"],
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )
            structlog.contextvars.clear_contextvars()

    return middleware
