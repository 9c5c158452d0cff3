"""AsyncEngine.call and a request's after_finish: run on the engine thread, between steps."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from inference.engine.async_engine import RequestAborted
from inference.outputs import RequestOutput
from inference.sampling.params import SamplingParams
from tests.inference.server.test_async_engine import CountingEngine, started


async def test_call_runs_on_the_engine_thread_and_returns_or_raises() -> None:
    engine = CountingEngine()
    async_engine, _ = started(engine)
    try:
        assert await async_engine.call(lambda: threading.current_thread().name) == "engine-loop"
        assert await async_engine.call(lambda: engine.num_steps) == 0

        def boom() -> None:
            raise KeyError("no such pin")

        with pytest.raises(KeyError, match="no such pin"):
            await async_engine.call(boom)
    finally:
        async_engine.close()


async def test_after_finish_runs_right_after_the_finishing_step() -> None:
    engine = CountingEngine(step_delay_s=0.005)
    async_engine, _ = started(engine)
    seen: list[tuple[str, int, bool, str]] = []

    def hook(output: RequestOutput) -> str:
        name = threading.current_thread().name
        seen.append((output.request_id, engine.num_steps, output.finished, name))
        return "pinned"

    try:
        # "long" keeps the engine stepping after "a" finishes: the hook must not wait.
        long = await async_engine.add_request("long", [1], SamplingParams(max_tokens=50))
        handle = await async_engine.add_request(
            "a", [1, 2], SamplingParams(max_tokens=3), after_finish=hook
        )
        steps_at_add = engine.num_steps
        outputs = [o async for o in handle.outputs()]
        assert await asyncio.wrap_future(handle.after_finish) == "pinned"
        long.abort()
    finally:
        async_engine.close()
    assert outputs[-1].finished
    (entry,) = seen
    assert entry[0] == "a" and entry[2] and entry[3] == "engine-loop"
    assert entry[1] <= steps_at_add + 3  # the step that finished it, not a later one


async def test_after_finish_of_an_aborted_or_failed_request_raises() -> None:
    engine = CountingEngine(step_delay_s=0.01)
    async_engine, _ = started(engine)
    try:
        handle = await async_engine.add_request(
            "a", [1], SamplingParams(max_tokens=1000), after_finish=lambda _o: "never"
        )
        async with contextlib.aclosing(handle.outputs()) as outputs:
            async for _ in outputs:
                break  # leaving aborts it
        with pytest.raises(RequestAborted):
            await asyncio.wait_for(asyncio.wrap_future(handle.after_finish), 5)
    finally:
        async_engine.close()

    failing = CountingEngine(fail_on_step=1)
    async_engine, _ = started(failing)
    try:
        handle = await async_engine.add_request(
            "b", [1], SamplingParams(max_tokens=5), after_finish=lambda _o: "never"
        )
        with pytest.raises(RuntimeError, match="step exploded"):
            await asyncio.wait_for(asyncio.wrap_future(handle.after_finish), 5)
        handle.abort()
    finally:
        async_engine.close()
