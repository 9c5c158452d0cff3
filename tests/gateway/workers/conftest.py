"""Stub workers on loopback: real HTTP servers answering /ready and /v1/models."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

TOKEN = "internal-test-token"


class StubWorker:
    """A worker's health endpoints on a fixed port; stop() and start() it like a process."""

    def __init__(self, models: list[str], max_model_len: int | None = 2048) -> None:
        self.models = models
        # On every card, as a real worker reports it; None leaves it out (an older server).
        self.max_model_len = max_model_len
        self.ready_status = 200
        self.authorizations: list[str | None] = []  # what each /v1/models call carried
        self.metrics_text: str | None = None  # what /metrics answers (None: a 404)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # or every answer stalls ~40 ms

            def do_GET(self) -> None:
                if self.path == "/ready":
                    ready = stub.ready_status == 200
                    self._answer(stub.ready_status, {"status": "ready" if ready else "loading"})
                elif self.path == "/v1/models":
                    auth = self.headers.get("Authorization")
                    stub.authorizations.append(auth)
                    if auth != f"Bearer {TOKEN}":
                        self._answer(401, {"error": {"message": "bad token"}})
                        return
                    cards = [stub.card(m) for m in stub.models]
                    self._answer(200, {"object": "list", "data": cards})
                elif self.path == "/metrics" and stub.metrics_text is not None:
                    payload = stub.metrics_text.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                else:
                    self._answer(404, {})

            def _answer(self, status: int, body: object) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def card(self, model: str) -> dict[str, object]:
        card: dict[str, object] = {"id": model, "object": "model"}
        if self.max_model_len is not None:
            card["max_model_len"] = self.max_model_len
        return card

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def stubs() -> Iterator[list[StubWorker]]:
    """Three running stub workers: two serve "tiny", one serves "other"."""
    workers = [StubWorker(["tiny"]), StubWorker(["tiny"]), StubWorker(["other"])]
    for worker in workers:
        worker.start()
    yield workers
    for worker in workers:
        worker.stop()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama checkpoint (built once per session, a few seconds)."""
    from tests.inference.checkpoints import make_checkpoint

    return make_checkpoint("llama", tmp_path_factory.mktemp("workers-llama"))
