"""What chat and completions share: submitting prompts, merging outputs, counting usage."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from inference.engine.async_engine import AsyncEngine, RequestHandle
from inference.outputs import RequestOutput
from inference.sampling.params import SamplingParams
from inference.server.errors import APIError, param_of_value_error
from inference.server.protocol import PromptTokensDetails, Usage
from inference.server.worker import Tenant

Receive = Callable[[], Awaitable[dict[str, Any]]]


async def submit(
    engine: AsyncEngine,
    base_id: str,
    prompts: Sequence[list[int]],
    params: SamplingParams,
    *,
    tenant: Tenant,
    prompt_param: str,
) -> list[RequestHandle]:
    """One engine request per prompt; all or none (the engine's ValueError is a 400)."""
    handles: list[RequestHandle] = []
    try:
        for index, token_ids in enumerate(prompts):
            handles.append(
                await engine.add_request(
                    f"{base_id}-{index}",
                    token_ids,
                    params,
                    tenant=tenant.name,
                    weight=tenant.weight,
                )
            )
    except ValueError as exc:
        for handle in handles:
            handle.abort()
        message = str(exc)
        param = param_of_value_error(message)
        raise APIError(
            message, param=prompt_param if param in (None, "prompt") else param
        ) from None
    except BaseException:
        for handle in handles:
            handle.abort()
        raise
    return handles


async def merged_outputs(
    handles: Sequence[RequestHandle],
) -> AsyncGenerator[tuple[int, RequestOutput], None]:
    """(prompt index, cumulative output) from every handle as they come; aborts on exit."""
    if len(handles) == 1:
        async with contextlib.aclosing(handles[0].outputs()) as outputs:
            async for output in outputs:
                yield 0, output
        return
    merged: asyncio.Queue[tuple[int, RequestOutput] | BaseException | None] = asyncio.Queue()

    async def pump(index: int, handle: RequestHandle) -> None:
        try:
            async with contextlib.aclosing(handle.outputs()) as outputs:
                async for output in outputs:
                    merged.put_nowait((index, output))
        except Exception as exc:
            merged.put_nowait(exc)
        finally:
            merged.put_nowait(None)

    tasks = [asyncio.create_task(pump(i, h)) for i, h in enumerate(handles)]
    try:
        remaining = len(tasks)
        while remaining:
            item = await merged.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        for handle in handles:
            handle.abort()


async def final_outputs(handles: Sequence[RequestHandle]) -> list[RequestOutput]:
    latest: dict[int, RequestOutput] = {}
    async with contextlib.aclosing(merged_outputs(handles)) as outputs:
        async for index, output in outputs:
            latest[index] = output
    return [latest[i] for i in range(len(handles))]


async def unless_disconnected(receive: Receive, work: Awaitable[Any]) -> Any:
    """Run ``work``; cancel it (aborting its requests) if the client disconnects first.

    Only for non-streaming responses, once the body has been read: the next ASGI message
    can then only be ``http.disconnect``.
    """
    task = asyncio.ensure_future(work)

    async def wait_for_disconnect() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.create_task(wait_for_disconnect())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            # Wait for its cleanup (the aborts) to run before answering, but let a
            # cancellation of this handler itself go through.
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
    if task.cancelled():
        raise ClientDisconnected
    return task.result()


class ClientDisconnected(Exception):
    pass


def usage_of(outputs: Sequence[RequestOutput]) -> Usage:
    prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
    completion_tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=sum(o.num_cached_tokens for o in outputs)
        ),
    )
