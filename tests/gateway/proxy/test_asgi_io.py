"""Noticing the client leave: a guarded wait ends in ClientGone, nothing else is cut off."""

from __future__ import annotations

import asyncio

import pytest

from gateway.domain.proxy.asgi_io import ClientGone, ClientWatch


class _Client:
    """An ASGI ``receive`` whose disconnect the test triggers."""

    def __init__(self) -> None:
        self.left = asyncio.Event()

    async def receive(self) -> dict[str, object]:
        await self.left.wait()
        return {"type": "http.disconnect"}


async def test_a_guarded_wait_ends_when_the_client_leaves() -> None:
    client = _Client()
    cancelled = asyncio.Event()

    async def worker_call() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async def quick() -> str:
        return "answer"

    with ClientWatch(client.receive) as watch:
        assert await watch.guard(quick()) == "answer"
        asyncio.get_running_loop().call_later(0.05, client.left.set)
        with pytest.raises(ClientGone):
            await watch.guard(worker_call())
    assert cancelled.is_set()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_leaving_outside_a_guard_cuts_nothing_off_and_the_next_guard_raises() -> None:
    client = _Client()
    with ClientWatch(client.receive) as watch:
        client.left.set()
        await asyncio.sleep(0.05)  # accounting, sending: not cancelled
        assert watch.gone
        with pytest.raises(ClientGone):
            await watch.guard(asyncio.sleep(10))


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    client = _Client()

    async def handler() -> None:
        with ClientWatch(client.receive) as watch:
            await watch.guard(asyncio.sleep(10))

    task = asyncio.ensure_future(handler())
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
