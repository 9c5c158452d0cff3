"""POST /v1/chat/completions: a conversation rendered with the model's chat template."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, get_args

import jinja2
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
from inference.server.logprobs import chat_logprobs
from inference.server.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ChatMessage,
    ChatResponseMessage,
    FunctionCall,
    Role,
    ToolCall,
    ToolCallDelta,
)
from inference.server.structured import constrain
from inference.server.tool_calls import ToolFormat, format_of, new_call_id, parse
from inference.server.tool_stream import ToolStreamer
from inference.server.tools import check_tools, constrain_tools, template_message
from inference.server.validation import (
    check_chat,
    check_prompt_fits,
    decode_request,
    resolve_max_tokens,
    to_sampling_params,
)
from inference.server.worker import Tenant, Worker

ROLES = frozenset(get_args(Role))


async def create_chat_completion(
    worker: Worker, body: bytes, *, tenant: Tenant, receive: Receive
) -> bytes | AsyncIterator[bytes]:
    """JSON bytes, or the SSE byte stream when ``stream`` is set."""
    request = decode_request(body, ChatCompletionRequest)
    check_chat(request)
    plan = check_tools(request)
    async_engine = worker.accept(request.model)
    engine = worker.loaded()
    token_ids = chat_prompt_token_ids(
        engine.tokenizer,
        request.messages,
        add_generation_prompt=request.add_generation_prompt,
        template_kwargs=request.chat_template_kwargs,
        tools=None if plan is None else plan.tools,
    )
    check_prompt_fits(len(token_ids), engine.max_model_len, "messages")
    requested: int | None
    if request.max_completion_tokens is not None:
        requested, param = request.max_completion_tokens, "max_completion_tokens"
    else:
        requested, param = request.max_tokens, "max_tokens"
    max_tokens = resolve_max_tokens(requested, len(token_ids), engine.max_model_len, param)
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    params = to_sampling_params(
        request, max_tokens=max_tokens, logprobs=logprobs, vocab_size=engine.arch.vocab_size
    )
    await constrain(engine, request, params)
    fmt: ToolFormat | None = None
    max_calls = None if request.parallel_tool_calls else 1
    if plan is not None:
        fmt = format_of(engine.tokenizer.chat_template_for(tools=True))
        await constrain_tools(engine, plan, fmt, params)
        if fmt == "mistral":  # [TOOL_CALLS] is a special token in Mistral's tokenizers
            params.skip_special_tokens = False
    response_id = f"chatcmpl-{uuid.uuid4().hex}"
    handles = await submit(
        async_engine, response_id, [token_ids], params, tenant=tenant, prompt_param="messages"
    )
    header = _Header(response_id, int(time.time()), worker.settings.served_model_name)
    if request.stream:
        include_usage = request.stream_options is not None and request.stream_options.include_usage
        return _stream(header, handles, request.n, engine.tokenizer, include_usage, fmt, max_calls)
    outputs = await unless_disconnected(receive, final_outputs(handles))
    return msgspec.json.encode(_completion(header, outputs[0], engine.tokenizer, fmt, max_calls))


def chat_prompt_token_ids(
    tokenizer: Any,
    messages: Sequence[ChatMessage],
    *,
    add_generation_prompt: bool,
    template_kwargs: dict[str, Any] | None,
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    conversation = []
    for i, message in enumerate(messages):
        if message.role not in ROLES:
            raise bad_param(
                f"messages[{i}].role",
                f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}, "
                f"got {message.role!r}",
            )
        entry: dict[str, Any] = {"role": message.role, "content": _text_of(message, i)}
        if message.name is not None:
            entry["name"] = message.name
        template_message(message, i, entry)
        conversation.append(entry)
    try:
        text = tokenizer.apply_chat_template(
            conversation,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            **(template_kwargs or {}),
        )
    except (ValueError, TypeError, jinja2.TemplateError) as exc:
        why = f"the chat template could not render these messages: {exc}"
        raise bad_param("messages", why) from None
    token_ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
    if not token_ids:
        raise bad_param("messages", "the rendered conversation is empty")
    return token_ids


def _text_of(message: ChatMessage, i: int) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for j, part in enumerate(message.content):
        if part.type != "text" or part.text is None:
            raise bad_param(
                f"messages[{i}].content[{j}]",
                f"only text content parts are supported, got type {part.type!r}",
            )
        texts.append(part.text)
    return "\n".join(texts)


class _Header(msgspec.Struct):
    id: str
    created: int
    model: str


def _completion(
    header: _Header,
    output: RequestOutput,
    tokenizer: Any,
    fmt: ToolFormat | None,
    max_calls: int | None,
) -> ChatCompletion:
    choices = []
    for sample in output.outputs:
        message = ChatResponseMessage(role="assistant", content=sample.text)
        finish_reason = sample.finish_reason
        if fmt is not None:
            parsed = parse(sample.text, fmt, max_calls)
            if parsed.calls:
                message.content = parsed.content
                message.tool_calls = [
                    ToolCall(id=new_call_id(), function=FunctionCall(c.name, c.arguments))
                    for c in parsed.calls
                ]
                finish_reason = _tool_finish(finish_reason)
        logprobs = None if sample.logprobs is None else chat_logprobs(tokenizer, sample.logprobs)
        choices.append(
            ChatChoice(
                index=sample.index,
                message=message,
                logprobs=logprobs,
                finish_reason=finish_reason,
                stop_reason=sample.stop_reason,
            )
        )
    return ChatCompletion(
        id=header.id,
        created=header.created,
        model=header.model,
        choices=choices,
        usage=usage_of([output]),
    )


async def _stream(
    header: _Header,
    handles: Sequence[RequestHandle],
    n: int,
    tokenizer: Any,
    include_usage: bool,
    fmt: ToolFormat | None = None,
    max_calls: int | None = None,
) -> AsyncIterator[bytes]:
    usage_field = None if include_usage else UNSET
    cursor = StreamCursor()
    streamers = {}
    if fmt is not None:
        streamers = {index: ToolStreamer(fmt, max_calls) for index in range(n)}
    latest: RequestOutput | None = None

    def chunk(choices: list[ChatChunkChoice], usage: Any = usage_field) -> bytes:
        return streaming.sse_event(
            ChatCompletionChunk(
                id=header.id,
                created=header.created,
                model=header.model,
                choices=choices,
                usage=usage,
            )
        )

    def finish(index: int, reason: str, stop_reason: str | int | None = None) -> bytes:
        return chunk(
            [
                ChatChunkChoice(
                    index=index, delta=ChatDelta(), finish_reason=reason, stop_reason=stop_reason
                )
            ]
        )

    try:
        for index in range(n):
            yield chunk(
                [ChatChunkChoice(index=index, delta=ChatDelta(role="assistant", content=""))]
            )
        async with contextlib.aclosing(merged_outputs(handles)) as outputs:
            async for _, output in outputs:
                latest = output
                for sample in output.outputs:
                    delta = cursor.advance(sample.index, sample)
                    if delta is None:
                        continue
                    logprobs = None
                    if delta.logprobs is not None:
                        logprobs = chat_logprobs(tokenizer, delta.logprobs)
                    streamer = streamers.get(sample.index)
                    if streamer is not None:
                        events = streamer.feed(delta.text)
                        if delta.finish_reason is not None:
                            events += streamer.finish()
                        choices = [_tool_chunk(sample.index, event) for event in events]
                        if logprobs is not None and delta.logprobs:  # whatever they wrote
                            if not choices:
                                choices.append(ChatChunkChoice(sample.index, ChatDelta()))
                            choices[0].logprobs = logprobs
                        for choice in choices:
                            yield chunk([choice])
                    elif delta.text or delta.logprobs:
                        choice = ChatChunkChoice(
                            index=sample.index,
                            delta=ChatDelta(content=delta.text),
                            logprobs=logprobs,
                        )
                        yield chunk([choice])
                    if delta.finish_reason is not None:
                        reason = delta.finish_reason
                        if streamer is not None and streamer.num_calls and reason == "stop":
                            reason = "tool_calls"
                        yield finish(sample.index, reason, delta.stop_reason)
    except RequestAborted:
        for index in range(n):
            if index not in cursor.finished:
                yield finish(index, "abort")
    except Exception as exc:
        yield streaming.sse_error(APIError(f"generation failed: {exc}", status=500))
        yield streaming.DONE
        return
    if include_usage and latest is not None:
        yield chunk([], usage_of([latest]))
    yield streaming.DONE


def _tool_finish(reason: str | None) -> str | None:
    """ "tool_calls" when the model stopped after its calls; a cut ("length") stays one."""
    return "tool_calls" if reason == "stop" else reason


def _tool_chunk(index: int, event: str | ToolCallDelta) -> ChatChunkChoice:
    if isinstance(event, str):
        return ChatChunkChoice(index=index, delta=ChatDelta(content=event))
    return ChatChunkChoice(index=index, delta=ChatDelta(tool_calls=[event]))
