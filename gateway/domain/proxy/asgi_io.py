"""Small ASGI helpers for the proxy's raw handlers: read the body, answer, watch the client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from typing import TypeVar

from litestar.types import Receive, Send

from gateway.domain.proxy.openai_errors import ApiError, error_body

MAX_BODY_BYTES = 32 * 1024 * 1024
T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body: bytes = message.get("body", b"")  # type: ignore[assignment]
        size += len(body)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


def encode_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_bytes(
    send: Send, status: int, body: bytes, headers: Mapping[str, str], media_type: str
) -> None:
    start = [(b"content-type", media_type.encode()), *encode_headers(headers)]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(send: Send, error: ApiError) -> None:
    body = error_body(error.status, error.message, error.code, error.param)
    await send_bytes(send, error.status, body, error.headers, "application/json")


async def until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(work: Awaitable[T], receive: Receive) -> T:
    """``work``'s result, or ClientGone (with ``work`` cancelled) if the client leaves first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientGone
