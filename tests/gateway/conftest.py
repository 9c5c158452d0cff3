from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from gateway.bench.fake_upstream import FakeUpstream
from tests.gateway.oidc_provider import RunningProvider, run_provider


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[RunningProvider]:
    """A real oidc-provider on a free 127.0.0.1 port, with two users in different groups."""
    with run_provider() as provider:
        yield provider


@pytest.fixture
def fake_worker() -> Iterator[str]:
    """A fake worker serving MODEL, on its own event loop in a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    upstream = FakeUpstream(chunks=2)
    port = asyncio.run_coroutine_threadsafe(upstream.start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(upstream.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
