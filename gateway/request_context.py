"""A request id per request, bound to the log context and echoed back; one log line each.

The id is always the gateway's own: it names the audit record, and spool replay matches
records by it, so a caller must not be able to choose it. A caller's own ``X-Request-Id``
(if plain) is kept beside it as ``client_request_id`` (log context, audit record) and
echoed back in ``X-Client-Request-Id``.

Two ways in use it: the ASGI middleware around Litestar's routes, and the OpenAI API's own
entry (`gateway.domain.proxy.entry`), which runs ahead of Litestar's stack.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from typing import cast

import structlog
from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
CLIENT_REQUEST_ID_HEADER = b"x-client-request-id"
# Accept a caller's id only if it is short and plain, so it is safe to log and echo.
_VALID_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")

log = structlog.get_logger("gateway.access")


def begin_request(scope: Scope, headers: Mapping[bytes, bytes]) -> str:
    """A new id for the request, bound to the log context and put in the scope's state,
    with the caller's own id (when it is plain) beside it."""
    request_id = f"req-{uuid.uuid4().hex}"
    incoming = headers.get(REQUEST_ID_HEADER, b"")
    client_request_id = incoming.decode() if _VALID_ID.match(incoming) else ""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id)
    state = scope.setdefault("state", {})
    state["request_id"] = request_id
    if client_request_id:
        structlog.contextvars.bind_contextvars(client_request_id=client_request_id)
        state["client_request_id"] = client_request_id
    return request_id


def end_request(method: str, path: str, status: int, started: float) -> None:
    """The canonical line: one per request, whatever its outcome."""
    log.info(
        "request",
        method=method,
        path=path,
        status=status,
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
    )
    structlog.contextvars.clear_contextvars()


class ReplyWithId:
    """The ASGI ``send`` of one request: adds the request ids to the response head and
    remembers the status (500 until a head is sent)."""

    __slots__ = ("client_request_id", "request_id", "send", "started", "status")

    def __init__(self, send: Send, request_id: str, client_request_id: str = "") -> None:
        self.send = send
        self.request_id = request_id
        self.client_request_id = client_request_id
        self.status = 500
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.started = True
            headers = list(message.get("headers", []))
            headers.append((REQUEST_ID_HEADER, self.request_id.encode()))
            if self.client_request_id:
                headers.append((CLIENT_REQUEST_ID_HEADER, self.client_request_id.encode()))
            message = {**message, "headers": headers}
        await self.send(message)


def reply_for(
    scope: Scope, send: Send, headers: Mapping[bytes, bytes] | None = None
) -> ReplyWithId:
    """Begin the request and wrap its ``send`` to echo both ids."""
    request_id = begin_request(scope, dict(scope["headers"]) if headers is None else headers)
    return ReplyWithId(send, request_id, str(scope["state"].get("client_request_id", "")))


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        http_scope = cast(HTTPScope, scope)
        started = time.perf_counter()
        reply = reply_for(scope, send)
        try:
            await app(scope, receive, reply)
        finally:
            end_request(http_scope["method"], http_scope["path"], reply.status, started)

    return middleware
