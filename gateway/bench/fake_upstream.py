"""A fast fake worker on loopback for benchmarking the gateway, not the model.

Raw asyncio HTTP/1.1 with keep-alive: it answers /ready, /health, /v1/models and
/v1/chat/completions (a fixed stream of ``chunks`` SSE events, or one JSON body) with
almost no work of its own, so what a benchmark measures is the gateway in front of it.
/tokenize counts a token per word of the messages' contents (or the prompt), plus
``TEMPLATE_TOKENS`` per message for a chat template's wrapping.
"""

from __future__ import annotations

import asyncio
import json
import threading

MODEL = "bench-model"
TEMPLATE_TOKENS = 4


def fake_token_count(body: bytes) -> int:
    """What the fake /tokenize answers for a request ``body`` (0 for one it cannot read)."""
    try:
        request = json.loads(body or b"{}")
        messages = request.get("messages") or []
        if not messages:
            return len(str(request.get("prompt") or "").split())
        return sum(len(str(m.get("content") or "").split()) + TEMPLATE_TOKENS for m in messages)
    except (ValueError, AttributeError):
        return 0


def _chunk(i: int) -> bytes:
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
        "usage": None,
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _usage_chunk(completion: int) -> bytes:
    usage = {"prompt_tokens": 12, "completion_tokens": completion, "total_tokens": 12 + completion}
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [],
        "usage": usage,
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class FakeUpstream:
    def __init__(
        self, chunks: int = 16, delay: float = 0.0, interval: float = 0.0, max_model_len: int = 4096
    ) -> None:
        self.chunks = chunks
        self.delay = delay  # seconds before each completion is answered
        self.interval = interval  # seconds between a stream's events (0: all at once)
        self.completions = 0  # completion requests received
        self.last_head = b""  # the last completion request's head (tests read its headers)
        self.last_tokenize = b""  # the last /tokenize request's body
        # Tests hold completions open until they set this (a threading.Event: any thread).
        self.release: threading.Event | None = None
        body = (
            b"".join(_chunk(i) for i in range(chunks)) + _usage_chunk(chunks) + b"data: [DONE]\n\n"
        )
        self._stream_head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        self._stream = self._stream_head + _frame(body) + b"0\r\n\r\n"
        events = [_chunk(i) for i in range(chunks)]
        events[-1] += _usage_chunk(chunks) + b"data: [DONE]\n\n"
        self._frames = [_frame(event) for event in events]
        unary = json.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 0,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": chunks,
                    "total_tokens": 12 + chunks,
                },
            }
        ).encode()
        self._unary = _response(b"application/json", unary)
        models = json.dumps(
            {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "max_model_len": max_model_len}],
            }
        ).encode()
        self._models = _response(b"application/json", models)
        self._ok = _response(b"application/json", b'{"status":"ok"}')
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.server = await asyncio.start_server(self._serve, host, port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length) if length else b""
                path = head.split(b" ", 2)[1]
                if path.startswith(b"/v1/chat/completions"):
                    self.completions += 1
                    self.last_head = head
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    while self.release is not None and not self.release.is_set():
                        await asyncio.sleep(0.01)
                    if not json.loads(body or b"{}").get("stream"):
                        writer.write(self._unary)
                    elif not self.interval:
                        writer.write(self._stream)
                    else:  # paced like a model generating tokens
                        writer.write(self._stream_head)
                        for frame in self._frames:
                            await asyncio.sleep(self.interval)
                            writer.write(frame)
                            await writer.drain()
                        writer.write(b"0\r\n\r\n")
                elif path.startswith(b"/v1/models"):
                    writer.write(self._models)
                elif path.startswith(b"/tokenize"):
                    self.last_tokenize = body
                    count = fake_token_count(body)
                    answer = {"count": count, "max_model_len": 4096, "tokens": [0] * count}
                    writer.write(_response(b"application/json", json.dumps(answer).encode()))
                else:
                    writer.write(self._ok)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _response(media_type: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + media_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
