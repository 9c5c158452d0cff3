"""AsyncEngine against a small stand-in with LLMEngine's add_request/step shape.

Only the wrapper is under test here (threading, queues, aborts); the API tests drive it
with the real engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence

import pytest

from inference.engine.async_engine import AsyncEngine, RequestAborted, RequestTiming
from inference.outputs import CompletionOutput, RequestOutput
from inference.sampling.params import SamplingParams


class CountingEngine:
    """Each step appends one token (its position) to every request until max_tokens."""

    def __init__(self, step_delay_s: float = 0.0, fail_on_step: int | None = None) -> None:
        self.step_delay_s = step_delay_s
        self.fail_on_step = fail_on_step
        self.num_steps = 0
        self.requests: dict[str, tuple[list[int], SamplingParams, list[int]]] = {}
        self.aborted: list[str] = []
        self.threads: set[str] = set()

    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams,
        *,
        tenant: str = "default",
        weight: float = 1.0,
    ) -> None:
        self.threads.add(threading.current_thread().name)
        if not prompt:
            raise ValueError("prompt must contain at least one token")
        self.requests[request_id] = (list(prompt), params, [])  # type: ignore[arg-type]

    def abort_request(self, request_id: str) -> None:
        if self.requests.pop(request_id, None) is not None:
            self.aborted.append(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self) -> list[RequestOutput]:
        self.threads.add(threading.current_thread().name)
        self.num_steps += 1
        time.sleep(self.step_delay_s)
        if self.num_steps == self.fail_on_step:
            raise RuntimeError("step exploded")
        outputs = []
        for request_id, (prompt, params, generated) in list(self.requests.items()):
            generated.append(len(generated))
            done = len(generated) >= (params.max_tokens or 1)
            completion = CompletionOutput(
                index=0,
                text=" ".join(map(str, generated)),
                token_ids=list(generated),
                finish_reason="length" if done else None,
            )
            outputs.append(RequestOutput(request_id, None, prompt, [completion], finished=done))
            if done:
                del self.requests[request_id]
        return outputs


def started(engine: CountingEngine) -> tuple[AsyncEngine, list[RequestTiming]]:
    timings: list[RequestTiming] = []
    async_engine = AsyncEngine(engine, on_finish=timings.append)
    async_engine.start()
    return async_engine, timings


async def test_outputs_are_cumulative_and_timed() -> None:
    engine = CountingEngine(step_delay_s=0.005)
    async_engine, timings = started(engine)
    try:
        handle = await async_engine.add_request("a", [5, 6, 7], SamplingParams(max_tokens=4))
        outputs = [o async for o in handle.outputs()]
    finally:
        async_engine.close()
    assert outputs[-1].finished and outputs[-1].outputs[0].token_ids == [0, 1, 2, 3]
    assert all(not o.finished for o in outputs[:-1])
    assert engine.threads == {"engine-loop"}  # the engine is only touched by its thread
    (timing,) = timings
    assert timing.finish_reason == "length"
    assert timing.num_prompt_tokens == 3 and timing.num_generated_tokens == 4
    assert timing.time_to_first_token is not None and timing.time_to_first_token > 0
    assert len(timing.inter_token_latencies) == 3
    assert (
        timing.end_to_end >= timing.time_to_first_token + sum(timing.inter_token_latencies) - 1e-6
    )


async def test_engine_rejection_is_raised_by_add_request() -> None:
    async_engine, timings = started(CountingEngine())
    try:
        with pytest.raises(ValueError, match="at least one token"):
            await async_engine.add_request("a", [], SamplingParams())
        assert async_engine.num_in_flight == 0
    finally:
        async_engine.close()
    assert timings == []


async def test_leaving_early_aborts_the_request() -> None:
    engine = CountingEngine(step_delay_s=0.01)
    async_engine, timings = started(engine)
    try:
        handle = await async_engine.add_request("a", [1], SamplingParams(max_tokens=1000))
        async with contextlib.aclosing(handle.outputs()) as outputs:
            async for output in outputs:
                if len(output.outputs[0].token_ids) >= 2:
                    break
        for _ in range(100):
            if engine.aborted:
                break
            await asyncio.sleep(0.01)
    finally:
        async_engine.close()
    assert engine.aborted == ["a"]
    assert async_engine.num_in_flight == 0
    assert [t.finish_reason for t in timings] == ["abort"]


async def test_loop_stays_responsive_during_a_slow_step() -> None:
    async_engine, _ = started(CountingEngine(step_delay_s=0.3))
    try:
        handle = await async_engine.add_request("a", [1], SamplingParams(max_tokens=2))
        consumer = asyncio.create_task(_drain(handle.outputs()))
        await asyncio.sleep(0.05)  # the first step is now sleeping in the engine thread
        began = time.monotonic()
        await asyncio.sleep(0.01)
        assert time.monotonic() - began < 0.1
        await consumer
    finally:
        async_engine.close()


async def test_abort_all_and_wait_idle() -> None:
    engine = CountingEngine(step_delay_s=0.01)
    async_engine, _ = started(engine)
    try:
        handle = await async_engine.add_request("a", [1], SamplingParams(max_tokens=10_000))
        consumer = asyncio.create_task(_drain(handle.outputs()))
        assert not await async_engine.wait_idle(0.1)
        async_engine.abort_all()
        with pytest.raises(RequestAborted):
            await consumer
        assert await async_engine.wait_idle(1.0)
        for _ in range(100):
            if engine.aborted:
                break
            await asyncio.sleep(0.01)
        assert engine.aborted == ["a"]
    finally:
        async_engine.close()


async def test_a_failed_step_fails_its_requests_and_the_loop_goes_on() -> None:
    engine = CountingEngine(fail_on_step=1)
    async_engine, _ = started(engine)
    try:
        handle = await async_engine.add_request("a", [1], SamplingParams(max_tokens=3))
        with pytest.raises(RuntimeError, match="step exploded"):
            await _drain(handle.outputs())
        again = await async_engine.add_request("b", [1], SamplingParams(max_tokens=2))
        last = await _drain(again.outputs())
        assert last.finished and last.outputs[0].token_ids == [0, 1]
    finally:
        async_engine.close()


async def test_duplicate_request_id_is_refused() -> None:
    async_engine, _ = started(CountingEngine(step_delay_s=0.01))
    try:
        handle = await async_engine.add_request("a", [1], SamplingParams(max_tokens=5))
        with pytest.raises(ValueError, match="already in use"):
            await async_engine.add_request("a", [1], SamplingParams(max_tokens=5))
        await _drain(handle.outputs())
    finally:
        async_engine.close()


async def _drain(outputs: object) -> RequestOutput:
    last = None
    async for output in outputs:  # type: ignore[attr-defined]
        last = output
    assert last is not None
    return last
