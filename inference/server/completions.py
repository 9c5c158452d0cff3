"""POST /v1/completions: prompts as text or token ids, streamed or not."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from inference.engine.async_engine import RequestAborted, RequestHandle
from inference.outputs import RequestOutput
from inference.server import streaming
from inference.server.cursor import StreamCursor
from inference.server.errors import APIError, bad_param
from inference.server.generation import (
    Receive,
    final_outputs,
    merged_outputs,
    submit,
    unless_disconnected,
    usage_of,
)
from inference.server.logprobs import completion_logprobs
from inference.server.protocol import Completion, CompletionChoice, CompletionRequest
from inference.server.structured import constrain
from inference.server.validation import (
    check_completion,
    check_prompt_fits,
    decode_request,
    resolve_max_tokens,
    to_sampling_params,
)
from inference.server.worker import Tenant, Worker

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for the legacy endpoint


async def create_completion(
    worker: Worker, body: bytes, *, tenant: Tenant, receive: Receive
) -> bytes | AsyncIterator[bytes]:
    """JSON bytes, or the SSE byte stream when ``stream`` is set."""
    request = decode_request(body, CompletionRequest)
    check_completion(request)
    async_engine = worker.accept(request.model)
    engine = worker.loaded()
    prompts = prompt_token_ids(request.prompt, engine.tokenizer, engine.arch.vocab_size)
    for token_ids in prompts:
        check_prompt_fits(len(token_ids), engine.max_model_len, "prompt")
    requested = DEFAULT_MAX_TOKENS if request.max_tokens is None else request.max_tokens
    max_tokens = resolve_max_tokens(
        requested, max(len(p) for p in prompts), engine.max_model_len, "max_tokens"
    )
    params = to_sampling_params(
        request,
        max_tokens=max_tokens,
        logprobs=request.logprobs,
        vocab_size=engine.arch.vocab_size,
    )
    await constrain(engine, request, params)
    response_id = f"cmpl-{uuid.uuid4().hex}"
    handles = await submit(
        async_engine, response_id, prompts, params, tenant=tenant, prompt_param="prompt"
    )
    header = _Header(response_id, int(time.time()), worker.settings.served_model_name)
    if request.stream:
        include_usage = request.stream_options is not None and request.stream_options.include_usage
        return _stream(header, handles, request.n, engine.tokenizer, include_usage)
    outputs = await unless_disconnected(receive, final_outputs(handles))
    return msgspec.json.encode(_completion(header, outputs, request.n, engine.tokenizer))


def prompt_token_ids(prompt: str | list[Any], tokenizer: Any, vocab_size: int) -> list[list[int]]:
    """Text, a list of texts, token ids, or a list of token-id lists: one id list each."""
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items:
        raise bad_param("prompt", "prompt must not be empty")
    prompts = []
    for item in items:
        if isinstance(item, str):
            token_ids = tokenizer.encode(item)
        elif isinstance(item, list) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in item
        ):
            token_ids = item
            bad = [t for t in token_ids if not 0 <= t < vocab_size]
            if bad:
                raise bad_param("prompt", f"prompt token id {bad[0]} is outside the vocabulary")
        else:
            raise bad_param(
                "prompt", "prompt must be a string, a list of strings, or token ids (list of ints)"
            )
        if not token_ids:
            raise bad_param("prompt", "prompt must not be empty")
        prompts.append(token_ids)
    return prompts


class _Header(msgspec.Struct):
    id: str
    created: int
    model: str


def _completion(
    header: _Header, outputs: Sequence[RequestOutput], n: int, tokenizer: Any
) -> Completion:
    choices = []
    for prompt_index, output in enumerate(outputs):
        for sample in output.outputs:
            choices.append(
                CompletionChoice(
                    index=prompt_index * n + sample.index,
                    text=sample.text,
                    logprobs=(
                        None
                        if sample.logprobs is None
                        else completion_logprobs(tokenizer, sample.logprobs)
                    ),
                    finish_reason=sample.finish_reason,
                    stop_reason=sample.stop_reason,
                )
            )
    return Completion(
        id=header.id,
        created=header.created,
        model=header.model,
        choices=choices,
        usage=usage_of(outputs),
    )


async def _stream(
    header: _Header,
    handles: Sequence[RequestHandle],
    n: int,
    tokenizer: Any,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    usage_field = None if include_usage else UNSET
    cursor = StreamCursor()
    latest: dict[int, RequestOutput] = {}

    def chunk(choices: list[CompletionChoice], usage: Any = usage_field) -> bytes:
        return streaming.sse_event(
            Completion(
                id=header.id,
                created=header.created,
                model=header.model,
                choices=choices,
                usage=usage,
            )
        )

    try:
        async with contextlib.aclosing(merged_outputs(handles)) as outputs:
            async for prompt_index, output in outputs:
                latest[prompt_index] = output
                for sample in output.outputs:
                    index = prompt_index * n + sample.index
                    delta = cursor.advance(index, sample)
                    if delta is None:
                        continue
                    logprobs = None
                    if delta.logprobs is not None:
                        logprobs = completion_logprobs(tokenizer, delta.logprobs, delta.text_offset)
                    yield chunk(
                        [
                            CompletionChoice(
                                index=index,
                                text=delta.text,
                                logprobs=logprobs,
                                finish_reason=delta.finish_reason,
                                stop_reason=delta.stop_reason,
                            )
                        ]
                    )
    except RequestAborted:
        unfinished = [i for i in range(len(handles) * n) if i not in cursor.finished]
        yield chunk(
            [
                CompletionChoice(index=i, text="", logprobs=None, finish_reason="abort")
                for i in unfinished
            ]
        )
    except Exception as exc:
        yield streaming.sse_error(APIError(f"generation failed: {exc}", status=500))
        yield streaming.DONE
        return
    if include_usage and latest:
        yield chunk([], usage_of([latest[i] for i in sorted(latest)]))
    yield streaming.DONE
