"""Small ASGI helpers for the proxy's raw handlers: read the body, answer, watch the client."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Mapping
from typing import TypeVar

from litestar.types import Receive, Send

from gateway.domain.proxy.openai_errors import ApiError, error_body

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


async def read_body(receive: Receive, max_bytes: int, content_length: bytes | None) -> bytes:
    """The whole body, or a 413 once it passes ``max_bytes`` (at once if it says it will)."""
    too_large = ApiError(
        413, f"the request body is larger than {max_bytes} bytes", reason="body_too_large"
    )
    declared = content_length.strip() if content_length else b""
    # The length check first: int() refuses a string of more than 4300 digits.
    if declared.isdigit() and (len(declared) > 20 or int(declared) > max_bytes):
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body: bytes = message.get("body", b"")  # type: ignore[assignment]
        size += len(body)
        if size > max_bytes:
            raise too_large
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


class ClientWatch:
    """Notices the client leaving while the handler waits on the worker.

    One task per request reads ``receive`` for the disconnect; :meth:`guard` awaits its
    work in the handler's own task and, if the client leaves meanwhile, cancels it and
    raises ClientGone (the way ``asyncio.timeout`` turns its cancellation into an error).
    A task per guarded step would cost a loop iteration before the worker is even written
    to. Outside a guard (sending to the client, accounting) nothing is cancelled: the next
    guard raises at once instead.
    """

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a ClientWatch runs inside a task")
        self._task = task
        self.gone = False
        self._guarding = False
        self._cancelling = 0
        self._watcher = asyncio.ensure_future(until_disconnect(receive))
        self._watcher.add_done_callback(self._left)

    def __enter__(self) -> ClientWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._watcher.remove_done_callback(self._left)
        self._watcher.cancel()

    async def guard(self, work: Awaitable[T]) -> T:
        """``work``'s result, or ClientGone (``work`` cancelled) if the client leaves first."""
        if self.gone:
            if inspect.iscoroutine(work):
                work.close()
            raise ClientGone
        self._cancelling = self._task.cancelling()
        self._guarding = True
        try:
            return await work
        except asyncio.CancelledError:
            if self.gone and self._task.uncancel() <= self._cancelling:
                raise ClientGone from None
            raise
        finally:
            self._guarding = False

    def _left(self, _watcher: asyncio.Future[None]) -> None:
        # A disconnect, or receive failing: either way the client is not there to answer.
        self.gone = True
        if self._guarding:
            self._task.cancel()
