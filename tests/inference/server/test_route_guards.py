"""Every route of the worker needs the bearer token, except /health, /ready and /metrics.

The routes are read from the app itself, so a route added later is covered without
editing this file. Requests go over a raw socket: an HTTP client would normalise the
path spellings (``//v1/completions``, ``/%761/models``) that these tests are about.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from inference.server.app import create_app
from inference.server.middleware import WorkerMiddleware
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import API_KEY, MODEL, metric

OPEN = {"/health", "/ready", "/metrics"}
GENERATE = json.dumps({"model": MODEL, "prompt": "Hello", "max_tokens": 2}).encode()
# Spellings of protected routes that a prefix check on the raw path let through (or might).
VARIANTS = [
    ("POST", "//v1/completions"),
    ("POST", "//v1/chat/completions"),
    ("POST", "//tokenize"),
    ("POST", "///detokenize"),
    ("GET", "/v1//models"),
    ("GET", "/V1/models"),
    ("GET", "/v1/models/"),
    ("GET", "/%761/models"),
    ("GET", "/v1%2Fmodels"),
    ("POST", "/v1/completions/"),
    ("POST", "/%2F/v1/completions"),
    ("GET", "/nothing-here"),
    ("GET", "/"),
    ("GET", "/health/../v1/models"),
    ("GET", "/HEALTH"),
]


def raw_request(
    base_url: str, method: str, path: str, *, token: str | None, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request with ``path`` sent byte for byte; (status, headers, body)."""
    url = urlsplit(base_url)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {url.netloc}", "Connection: close"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, payload = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        payload = _dechunk(payload)
    return int(status_line.split()[1]), headers, payload


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def assert_openai_401(status: int, headers: dict[str, str], body: bytes, where: str) -> None:
    assert status == 401, f"{where}: {status} {body[:200]!r}"
    error = json.loads(body)["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key", where
    assert set(error) == {"message", "type", "param", "code"}, where
    assert headers["www-authenticate"] == "Bearer", where


@pytest.fixture(scope="module")
def routes(checkpoint: Path) -> list[tuple[str, str]]:
    """(method, path) of every route of the worker app, OPTIONS included."""
    app = create_app(lambda: None, ServerSettings(served_model_name=MODEL, api_key=API_KEY))
    found = []
    for route in app.app.routes:
        # A path parameter gets a sample value (the prefix routes take an id).
        path = re.sub(r"\{[^}]*\}", "1", route.path)
        found += [(method, path) for method in sorted(route.methods)]  # type: ignore[attr-defined]
    assert {path for _, path in found} >= {"/v1/completions", "/tokenize", *OPEN}
    return found


def generated(worker_url: str) -> float:
    status, _, page = raw_request(worker_url, "GET", "/metrics", token=None)
    assert status == 200
    return metric(page.decode(), "inference_requests_total")


def test_every_route_needs_the_token_but_the_probes(
    worker_url: str, routes: list[tuple[str, str]]
) -> None:
    before = generated(worker_url)
    for method, path in routes:
        body = GENERATE if method == "POST" else b""
        for token in (None, "wrong-token", API_KEY[:-1], API_KEY + "x"):
            status, headers, reply = raw_request(worker_url, method, path, token=token, body=body)
            if path in OPEN:
                assert status != 401, f"{method} {path} with {token!r}: {status}"
            else:
                assert_openai_401(status, headers, reply, f"{method} {path} with {token!r}")
        status, _, reply = raw_request(worker_url, method, path, token=API_KEY, body=body)
        assert status != 401, f"{method} {path} with the token: {status} {reply[:200]!r}"
    assert generated(worker_url) > before  # the right token did generate


def test_path_spellings_need_the_token_and_never_generate(worker_url: str) -> None:
    before = generated(worker_url)
    for method, path in VARIANTS:
        body = GENERATE if method == "POST" else b""
        for token in (None, "wrong-token"):
            status, headers, reply = raw_request(worker_url, method, path, token=token, body=body)
            assert_openai_401(status, headers, reply, f"{method} {path} with {token!r}")
    assert generated(worker_url) == before


def test_the_probes_stay_open(worker_url: str) -> None:
    for path in OPEN:
        status, _, _ = raw_request(worker_url, "GET", path, token=None)
        assert status == 200, path


def test_a_websocket_is_refused_before_the_app() -> None:
    # uvicorn here has no WebSocket library, so this is checked at the ASGI level.
    called: list[Any] = []
    sent: list[dict[str, Any]] = []

    async def inner(*args: Any) -> None:
        called.append(args)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    guard = WorkerMiddleware(inner, api_key=API_KEY)
    scope = {"type": "websocket", "path": "/v1/models", "headers": []}
    asyncio.run(guard(scope, receive, send))
    assert not called and sent == [{"type": "websocket.close", "code": 1008}]
