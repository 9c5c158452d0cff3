"""Forwarding one request to a worker: a whole answer, or a stream passed through.

Each forward returns how the request ended (an `Ending`); the handler hands it to the
accounting, so nothing here settles, meters or audits.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import msgspec
from litestar.types import Receive, Send

from gateway.domain.proxy.asgi_io import (
    ClientGone,
    ClientWatch,
    encode_headers,
    send_bytes,
)
from gateway.domain.proxy.body import ApiRequest
from gateway.domain.proxy.exchange import Ending
from gateway.domain.proxy.http1 import (
    ConnectFailed,
    Http1Pool,
    Response,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.domain.proxy.openai_errors import ApiError, error_body, error_event
from gateway.domain.proxy.sse import StreamTap, Usage

PATHS = {"chat.completions": "/v1/chat/completions", "completions": "/v1/completions"}
_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Call:
    """One POST to a worker."""

    url: str
    body: bytes
    headers: dict[str, str]


# A worker that cannot be reached at all never saw the request: safe to try another.
CONNECT_ERRORS = (ConnectFailed,)
CALL_ERRORS = (UpstreamError,)


def upstream_error(exc: BaseException, url: str) -> ApiError:
    """A failed call to a worker, as the client should hear it."""
    if isinstance(exc, CONNECT_ERRORS):
        return ApiError(
            503, f"the worker {url} is unreachable; try again", reason="upstream_unreachable"
        )
    if isinstance(exc, UpstreamTimeout):
        return ApiError(504, f"the worker {url} did not answer in time", reason="upstream_timeout")
    return ApiError(502, f"the worker {url} failed: {exc!r}", reason="upstream_error")


def client_status(worker_status: int) -> int:
    """Worker refusals (4xx, 503 busy) pass through; its other failures are the gateway's 502."""
    return worker_status if worker_status < 500 or worker_status == 503 else 502


async def forward_unary(
    http: Http1Pool,
    call: Call,
    request: ApiRequest,
    keep_body: bool,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
) -> Ending:
    with ClientWatch(receive) as watch:
        response = await watch.guard(http.post(call.url, call.body, call.headers))
        try:
            body = await watch.guard(response.read())
        finally:
            response.release()
    status = client_status(response.status)
    usage = None
    if response.status == 200:
        with contextlib.suppress(msgspec.DecodeError):
            decoded = msgspec.json.decode(body)
            usage = Usage.of(decoded.get("usage")) if isinstance(decoded, dict) else None
    elif status == 502:
        text = body[:500].decode("utf-8", "replace")
        body = error_body(502, f"the worker failed with {response.status}: {text}")
    if "retry-after" in response.headers:
        headers = {**headers, "retry-after": response.headers["retry-after"]}
    await send_bytes(send, status, body, headers, "application/json")
    reason = "" if status == 200 else ("upstream_rejected" if status < 500 else "upstream_error")
    error = "" if status == 200 else body.decode("utf-8", "replace")
    kept = body.decode("utf-8", "replace") if keep_body else None
    return Ending(status, usage, reason=reason, error=error, response_body=kept)


async def forward_stream(
    http: Http1Pool,
    call: Call,
    request: ApiRequest,
    keep_body: bool,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
) -> Ending:
    with ClientWatch(receive) as watch:
        response = await watch.guard(http.post(call.url, call.body, call.headers))
        complete = False
        try:
            if response.status != 200:
                body = await watch.guard(response.read())
                status = client_status(response.status)
                body = body if status != 502 else error_body(502, "the worker failed")
                await send_bytes(send, status, body, headers, "application/json")
                reason = "upstream_rejected" if status < 500 else "upstream_error"
                complete = True
                return Ending(status, reason=reason, error=body.decode("utf-8", "replace"))
            tap = StreamTap(request.client_wants_usage, capture=keep_body)
            start = [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                *encode_headers(headers),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": start})
            try:
                status, reason, error = await watch.guard(_pump(response, call.url, tap, send))
            except ClientGone:
                return _stream_ending(tap, 499, "client_disconnected", "")
            complete = tap.done
            return _stream_ending(tap, status, reason, error)
        finally:
            if complete:
                response.release()  # read to the end: the connection is kept for the next call
            else:
                response.close()  # mid-stream, this drops the connection: the worker cancels


async def _pump(response: Response, url: str, tap: StreamTap, send: Send) -> tuple[int, str, str]:
    """Forward events until [DONE]; a break becomes an error event, then [DONE]."""
    failure: ApiError | None = None
    try:
        async for data in response.chunks():
            out = tap.feed(data)
            if out:
                try:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                except Exception as exc:  # the server could not write: the client is gone
                    raise ClientGone from exc
    except CALL_ERRORS as exc:
        failure = upstream_error(exc, url)
    if failure is None and not tap.done:
        failure = ApiError(502, "the worker ended the stream early", reason="upstream_broke")
    if failure is not None:
        reason = "upstream_broke" if failure.status == 502 else failure.reason
        message = f"the stream broke: {failure.message}"
        tail = error_event(failure.status, message, "upstream_broke") + _DONE
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return failure.status, reason, message
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    if tap.error:
        return 500, "upstream_error", tap.error
    return 200, "", ""


def _stream_ending(tap: StreamTap, status: int, reason: str, error: str) -> Ending:
    text = "".join(tap.text) if tap.capture else None
    return Ending(
        status,
        tap.usage,
        reason=reason,
        error=error,
        first_token_at=tap.first_token_at,
        response_body=text,
        completion_chunks=tap.chunks,
    )
