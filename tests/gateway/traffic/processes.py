"""Gateway processes and a fake worker for the multi-process traffic tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from gateway.bench.fake_upstream import FakeUpstream
from tests.gateway.postgres import fresh_postgres
from tests.inference.server.conftest import API_KEY, free_port

__all__ = [
    "Link",
    "fake_worker",
    "fresh_postgres",
    "gateway_process",
    "link_to",
    "worker_process",
]


@contextlib.contextmanager
def fake_worker(
    chunks: int = 4, delay: float = 0.0, max_model_len: int = 4096
) -> Iterator[tuple[str, FakeUpstream]]:
    """The benchmark's fake worker on its own event loop in a thread."""
    upstream = FakeUpstream(chunks, delay, max_model_len=max_model_len)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(upstream.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{upstream.port}", upstream
    finally:
        asyncio.run_coroutine_threadsafe(upstream.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.contextmanager
def gateway_process(env: dict[str, str], data_dir: Path) -> Iterator[str]:
    """`enclave serve` as its own OS process; yields its base URL once /health answers."""
    port = free_port()
    log = (data_dir / f"gateway-{port}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        env={**os.environ, **env, "ENCLAVE_PORT": str(port), "ENCLAVE_DATA_DIR": str(data_dir)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError((data_dir / f"gateway-{port}.log").read_text()[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start in 60 s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


class Link:
    """A TCP forwarder to a real service that a test can cut and restore.

    Cutting it closes every connection through it and stops listening, which is what
    clients see when the service behind it goes down; restoring listens again on the same
    port. The service itself (the machine's Postgres or Redis) is never touched.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def restore(self) -> None:
        self._call(self._listen())

    def cut(self) -> None:
        self._call(self._close())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.transport.abort()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))


@contextlib.contextmanager
def link_to(url: str) -> Iterator[tuple[Link, str]]:
    """A cuttable link to the service at ``url``; yields it and the URL through it."""
    parsed = urlsplit(url)
    link = Link(parsed.hostname or "127.0.0.1", parsed.port or 0)
    link.restore()
    netloc = parsed.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{link.port}"
    through = parsed._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host)
    try:
        yield link, urlunsplit(through)
    finally:
        link.close()


def worker_process(
    checkpoint: Path, port: int, log: Path, token: str = API_KEY
) -> subprocess.Popen[bytes]:
    """`python -m inference serve` on ``checkpoint`` as model "tiny", once it is ready."""
    command = [
        sys.executable, "-m", "inference", "serve", "--model", str(checkpoint),
        "--port", str(port), "--served-model-name", "tiny", "--api-key-env", "WORKER_TOKEN",
        "--dtype", "float32", "--max-model-len", "256", "--kv-cache-memory-bytes", str(4 << 20),
    ]  # fmt: skip
    env = {**os.environ, "WORKER_TOKEN": token}
    process = subprocess.Popen(command, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(log.read_text()[-2000:])
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return process
        time.sleep(0.2)
    process.kill()
    raise AssertionError("the worker did not become ready")
