"""/v1/internal/prefixes: pinned, warm prompt prefixes (the gateway's department assistants).

POST prefills a prompt once (a one-token request whose output is dropped) and pins its
full KV blocks in the prefix cache at the end of the step that finished it, on the engine
thread, so nothing can evict them in between (see AsyncEngine.add_request's
``after_finish``). A prompt whose full blocks are all cached already is pinned at once,
with no prefill. DELETE unpins (the blocks stay cached until evicted); GET lists the pins.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from inference.engine.async_engine import AsyncEngine, RequestAborted
from inference.engine.prefix_pins import Pin, PinCapacityError
from inference.sampling.params import SamplingParams
from inference.server.chat import chat_prompt_token_ids
from inference.server.errors import APIError, bad_param
from inference.server.protocol import (
    Prefix,
    PrefixDeleted,
    PrefixList,
    PrefixRequest,
    PrefixSummary,
)
from inference.server.validation import check_prompt_fits, decode_request
from inference.server.worker import Tenant, Worker

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine

PATH = "/v1/internal/prefixes"
_SOURCES = ("messages", "prompt", "prompt_token_ids")
_WARM_PARAMS = SamplingParams(max_tokens=1, temperature=0.0)


def prefix_routes(
    worker: Worker, tenant_headers: tuple[str, str], json: Callable[[bytes], Response[bytes]]
) -> list[HTTPRouteHandler]:
    """The three handlers, bound to ``worker``; ``tenant_headers``: the names app.py reads."""

    @post(PATH, status_code=200)
    async def create_prefix(request: Request[Any, Any, Any]) -> Response[bytes]:
        tenant = worker.tenant_of(*(request.headers.get(name) for name in tenant_headers))
        body = decode_request(await request.body(), PrefixRequest)
        async_engine = worker.accept(body.model)
        engine = worker.loaded()
        token_ids, param = _token_ids(worker, body)
        check_prompt_fits(len(token_ids), engine.max_model_len, param)
        try:
            pin = await async_engine.call(lambda: engine.pin_prefix(token_ids, only_if_cached=True))
            if pin is not None:  # pinned before, or every full block cached: no prefill
                cached = pin.pinned_tokens
            else:
                pin, cached = await _warm(async_engine, engine, token_ids, tenant)
        except PinCapacityError as exc:
            raise APIError(str(exc), status=409, code="pin_capacity_exceeded") from None
        except ValueError as exc:  # the engine refused the warm-up request (too big)
            raise APIError(str(exc), param=param) from None
        except RequestAborted:
            raise APIError("The server cut the warm-up off (shutting down)", status=503) from None
        answer = Prefix(
            id=pin.pin_id,
            num_tokens=pin.num_tokens,
            pinned_tokens=pin.pinned_tokens,
            pinned_blocks=pin.num_blocks,
            cached_tokens=cached,
        )
        return json(msgspec.json.encode(answer))

    @delete(PATH + "/{pin_id:str}", status_code=200)
    async def delete_prefix(pin_id: FromPath[str]) -> Response[bytes]:
        async_engine = worker.require_engine()
        engine = worker.loaded()
        try:
            pin = await async_engine.call(lambda: engine.unpin_prefix(pin_id))
        except KeyError:
            raise APIError(
                f"No pinned prefix has the id {pin_id[:64]!r}", status=404, param="id"
            ) from None
        return json(
            msgspec.json.encode(PrefixDeleted(id=pin.pin_id, unpinned_blocks=pin.num_blocks))
        )

    @get(PATH)
    async def list_prefixes() -> Response[bytes]:
        async_engine = worker.require_engine()
        bm = worker.loaded().scheduler.block_manager
        # Read on the engine thread: the pins change there.
        pins, pinned = await async_engine.call(
            lambda: (list(bm.pins.values()), bm.num_pinned_blocks)
        )
        data = [PrefixSummary(p.pin_id, p.num_tokens, p.pinned_tokens, p.num_blocks) for p in pins]
        listing = PrefixList(
            data=data, pinned_blocks=pinned, max_pinned_blocks=bm.max_pinned_blocks
        )
        return json(msgspec.json.encode(listing))

    return [create_prefix, delete_prefix, list_prefixes]


def _token_ids(worker: Worker, body: PrefixRequest) -> tuple[list[int], str]:
    given = [name for name in _SOURCES if getattr(body, name) is not None]
    if len(given) != 1:
        raise bad_param(
            given[1] if given else "messages",
            "give exactly one of messages, prompt and prompt_token_ids",
        )
    engine = worker.loaded()
    if body.messages is not None:
        ids = chat_prompt_token_ids(
            engine.tokenizer, body.messages, add_generation_prompt=False, template_kwargs=None
        )
        return ids, "messages"
    if body.prompt is not None:
        ids = engine.tokenizer.encode(body.prompt)
        if not ids:
            raise bad_param("prompt", "the prompt encodes to no tokens")
        return list(ids), "prompt"
    ids = list(body.prompt_token_ids or [])
    vocab_size = engine.arch.vocab_size
    bad = [t for t in ids if t >= vocab_size]
    if bad:
        raise bad_param("prompt_token_ids", f"token id {bad[0]} is outside the vocabulary")
    return ids, "prompt_token_ids"


async def _warm(
    async_engine: AsyncEngine, engine: LLMEngine, token_ids: list[int], tenant: Tenant
) -> tuple[Pin, int]:
    """Prefill ``token_ids`` with a one-token request, pinning as it finishes."""
    handle = await async_engine.add_request(
        f"prefix-{uuid.uuid4().hex}",
        token_ids,
        _WARM_PARAMS,
        tenant=tenant.name,
        weight=tenant.weight,
        after_finish=lambda _output: engine.pin_prefix(token_ids),
    )
    cached = 0
    async with contextlib.aclosing(handle.outputs()) as outputs:
        async for output in outputs:
            cached = output.num_cached_tokens
    pin = await asyncio.wrap_future(handle.after_finish)
    return cast(Pin, pin), cached  # pin_prefix without only_if_cached returns a Pin
