"""Server-sent events framed the way OpenAI frames them: ``data: <json>\\n\\n`` per chunk,
then ``data: [DONE]\\n\\n``."""

from __future__ import annotations

from typing import Any

import msgspec

from inference.server.errors import APIError

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MEDIA_TYPE = "text/event-stream"


# JSON may carry these raw, but line readers built on str.splitlines() (httpx's
# iter_lines, for one) break lines at them; escaped, every event stays one line. In UTF-8
# these byte sequences can only be these characters, so replacing bytes is safe.
_LINE_BREAKING = (
    (b"\xc2\x85", b"\\u0085"),
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
)


def sse_event(payload: Any) -> bytes:
    return _frame(msgspec.json.encode(payload))


def sse_error(error: APIError) -> bytes:
    """An error after the stream has started: the status line has already gone out."""
    return _frame(error.body())


def _frame(body: bytes) -> bytes:
    for raw, escaped in _LINE_BREAKING:
        body = body.replace(raw, escaped)
    return b"data: " + body + b"\n\n"
