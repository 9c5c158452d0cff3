"""From request bytes to a validated request and the engine's SamplingParams.

Every rejection is an :class:`APIError` naming the offending parameter, so the client can
tell which field to fix.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from inference.sampling.params import SamplingParams
from inference.server.errors import APIError, bad_param, param_of_value_error, unsupported
from inference.server.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields

RequestT = TypeVar("RequestT", bound=msgspec.Struct)

MAX_N = 128
MAX_LOGPROBS = 20
MAX_DEPTH = 32  # nesting of free-form fields such as chat_template_kwargs
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]*)`")
_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`$")


def decode_request(body: bytes, kind: type[RequestT]) -> RequestT:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise _validation_error(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise APIError(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        # msgspec decodes nested arrays and objects recursively and gives up (RecursionError,
        # not a DecodeError) near Python's recursion limit: the client sent that nesting.
        raise APIError("The request body is nested too deeply", code="invalid_json") from None


def check_depth(value: Any, param: str, limit: int = MAX_DEPTH) -> None:
    """400 if ``value`` nests lists and objects more than ``limit`` deep.

    Free-form fields (``Any``) decode at any depth msgspec allows, and the code that walks
    them later (the chat template's data copy) recurses: this walk does not.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise bad_param(param, f"{param} is nested more than {limit} levels deep")
        stack.extend((child, depth + 1) for child in children)


def _validation_error(message: str) -> APIError:
    path_match = _AT_PATH.search(message)
    path = path_match.group(1) if path_match else ""
    unknown = _UNKNOWN_FIELD.search(message)
    if unknown:
        name = f"{path}.{unknown.group(1)}" if path else unknown.group(1)
        return APIError(
            f"Unrecognized request argument supplied: {name}",
            param=name,
            code="unsupported_parameter",
        )
    return APIError(f"Invalid request: {message}", param=path or None)


def check_common(request: SamplingFields) -> None:
    """Rules both endpoints share that SamplingParams does not know about."""
    if request.suffix is not None:
        raise unsupported("suffix")
    if request.best_of is not None and request.best_of != request.n:
        raise unsupported("best_of", "is not supported (only best_of == n)")
    if not 1 <= request.n <= MAX_N:
        raise bad_param("n", f"n must be between 1 and {MAX_N}, got {request.n}")
    # JSON integers have no bound; torch's generator takes 64 bits (seed + sample index).
    if request.seed is not None and not -(2**63) <= request.seed < 2**63:
        raise bad_param("seed", "seed must be a 64-bit signed integer")
    if request.stream_options is not None and not request.stream:
        raise bad_param("stream_options", "stream_options is only allowed when stream is true")


def check_chat(request: ChatCompletionRequest) -> None:
    check_common(request)
    for name in ("functions", "function_call"):
        if getattr(request, name) is not None:
            raise unsupported(name, "is not supported (deprecated by OpenAI): use tools")
    if not request.messages:
        raise bad_param("messages", "messages must contain at least one message")
    if request.chat_template_kwargs is not None:
        check_depth(request.chat_template_kwargs, "chat_template_kwargs")
    if request.top_logprobs is not None:
        if not request.logprobs:
            raise bad_param("top_logprobs", "top_logprobs requires logprobs to be true")
        if not 0 <= request.top_logprobs <= MAX_LOGPROBS:
            raise bad_param(
                "top_logprobs",
                f"top_logprobs must be in [0, {MAX_LOGPROBS}], got {request.top_logprobs}",
            )


def check_completion(request: CompletionRequest) -> None:
    check_common(request)
    if request.echo:
        raise unsupported("echo", "is not supported yet")
    if request.logprobs is not None and not 0 <= request.logprobs <= MAX_LOGPROBS:
        raise bad_param(
            "logprobs", f"logprobs must be in [0, {MAX_LOGPROBS}], got {request.logprobs}"
        )


def check_prompt_fits(num_prompt_tokens: int, max_model_len: int, param: str) -> None:
    if num_prompt_tokens >= max_model_len:
        raise APIError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt has {num_prompt_tokens} tokens, which leaves no room to generate.",
            param=param,
            code="context_length_exceeded",
        )


def resolve_max_tokens(
    requested: int | None, num_prompt_tokens: int, max_model_len: int, param: str
) -> int:
    """``None`` means "up to the context length", as in vLLM's chat endpoint."""
    room = max_model_len - num_prompt_tokens
    if requested is None:
        return room
    if requested < 1:
        raise bad_param(param, f"{param} must be at least 1, got {requested}")
    if requested > room:
        raise APIError(
            f"{param} is too large: {requested}. This model's maximum context length is "
            f"{max_model_len} tokens and your request has {num_prompt_tokens} input tokens "
            f"({requested} + {num_prompt_tokens} > {max_model_len}).",
            param=param,
            code="context_length_exceeded",
        )
    return requested


def to_sampling_params(
    request: SamplingFields, *, max_tokens: int, logprobs: int | None, vocab_size: int
) -> SamplingParams:
    bias: dict[int, float] | None = None
    if request.logit_bias:
        bias = {}
        for key, value in request.logit_bias.items():
            try:
                token_id = int(key)
            except ValueError:
                raise bad_param(
                    "logit_bias", f"logit_bias keys must be token ids, got {key!r}"
                ) from None
            if not 0 <= token_id < vocab_size:
                raise bad_param(
                    "logit_bias", f"logit_bias token id {token_id} is outside the vocabulary"
                )
            bias[token_id] = value
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    try:
        return SamplingParams(
            n=request.n,
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=0 if request.top_k is None else request.top_k,
            min_p=0.0 if request.min_p is None else request.min_p,
            presence_penalty=request.presence_penalty or 0.0,
            frequency_penalty=request.frequency_penalty or 0.0,
            repetition_penalty=(
                1.0 if request.repetition_penalty is None else request.repetition_penalty
            ),
            logit_bias=bias,
            seed=request.seed,
            max_tokens=max_tokens,
            min_tokens=request.min_tokens,
            stop=stop,
            stop_token_ids=list(request.stop_token_ids or []),
            ignore_eos=request.ignore_eos,
            logprobs=logprobs,
            skip_special_tokens=request.skip_special_tokens,
            speculative=request.speculative,
        )
    except ValueError as exc:
        message = str(exc)
        raise APIError(message, param=param_of_value_error(message)) from None
