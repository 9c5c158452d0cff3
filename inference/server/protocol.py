"""Request and response schemas of the OpenAI-compatible API (msgspec).

Requests forbid unknown fields, so a misspelt or unsupported parameter is a 400 that names
it rather than being silently ignored. Parameters we know but do not implement yet are
declared as ``Any`` so that the handler can reject them with a precise message.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

# On the fields the handlers refuse empty, so that the OpenAPI document says so too.
NOT_EMPTY = msgspec.Meta(min_length=1)


class StreamOptions(Struct, forbid_unknown_fields=True):
    include_usage: bool = False


class JsonSchemaFormat(Struct, forbid_unknown_fields=True):
    name: str
    # msgspec names the field "schema" in JSON as in Python; Any: checked in structured.py.
    schema: Any = None
    description: str | None = None
    strict: bool | None = None


class TextFormat(Struct, tag="text", tag_field="type", forbid_unknown_fields=True):
    pass


class JsonObjectFormat(Struct, tag="json_object", tag_field="type", forbid_unknown_fields=True):
    pass


class JsonSchemaResponseFormat(
    Struct, tag="json_schema", tag_field="type", forbid_unknown_fields=True
):
    json_schema: JsonSchemaFormat


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaResponseFormat


class SamplingFields(Struct, kw_only=True, forbid_unknown_fields=True):
    """What chat and completions requests share: OpenAI's fields, then vLLM's extras."""

    model: str
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM's extras
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    # Ours: false keeps the request out of speculative decoding (same output either way).
    speculative: bool = True
    # Structured outputs (at most one): OpenAI's response_format, then vLLM's guided_*.
    response_format: ResponseFormat | None = None
    guided_json: Any = None  # a JSON schema, as an object or as JSON text
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None  # Lark (or llama.cpp's GBNF)
    # Known, not implemented: rejected by name.
    best_of: Any = None
    suffix: Any = None
    metadata: Any = None


class CompletionRequest(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    # str, list[str], list[int] or list[list[int]]; msgspec allows one array type per
    # union, so the shape is checked in completions.py.
    prompt: Annotated[str, NOT_EMPTY] | Annotated[list[Any], NOT_EMPTY]
    logprobs: int | None = None
    echo: bool = False


# What chat.py can render; in the structs so that the OpenAPI document says so too.
Role = Literal["system", "developer", "user", "assistant", "tool"]


class ContentPart(Struct):
    type: Literal["text"]  # only text parts are supported
    text: str


class FunctionCall(Struct):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Struct):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # on assistant messages
    tool_call_id: str | None = None  # on tool messages


# OpenAI's rule for function names.
FunctionName = Annotated[str, msgspec.Meta(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]


class FunctionDefinition(Struct, kw_only=True, forbid_unknown_fields=True):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; checked in tools.py
    strict: bool | None = None


class Tool(Struct, kw_only=True, forbid_unknown_fields=True):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Struct, forbid_unknown_fields=True):
    name: str


class NamedToolChoice(Struct, kw_only=True, forbid_unknown_fields=True):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ChatCompletionRequest(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    messages: Annotated[list[ChatMessage], NOT_EMPTY]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    # OpenAI's deprecated function calling: rejected by name (use tools).
    functions: Any = None
    function_call: Any = None


class TokenizeRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[Tool] | None = None  # with messages: rendered as a chat with them renders
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class DetokenizeRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    tokens: list[int]
    model: str | None = None


class TokenizeResponse(Struct):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeResponse(Struct):
    prompt: str


# -- responses ----------------------------------------------------------------------------


class PromptTokensDetails(Struct):
    cached_tokens: int


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Struct):
    content: list[ChatTokenLogprob]
    refusal: None = None


class CompletionLogprobs(Struct):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class ChatResponseMessage(Struct):
    role: str
    content: str | None  # None when the reply is only tool calls
    refusal: None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)


class ChatChoice(Struct):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None
    stop_reason: str | int | None = None


class ChatCompletion(Struct, kw_only=True):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[ChatChoice]
    usage: Usage


class FunctionCallDelta(Struct):
    name: str | UnsetType = UNSET
    arguments: str = ""


class ToolCallDelta(Struct, kw_only=True):
    """The first delta of a call carries its id, type and name; later ones append to
    function.arguments."""

    index: int
    id: str | UnsetType = UNSET
    type: Literal["function"] | UnsetType = UNSET
    function: FunctionCallDelta


class ChatDelta(Struct):
    # UNSET fields are left out of the JSON, as OpenAI leaves them out of a delta.
    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET


class ChatChunkChoice(Struct):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionChunk(Struct, kw_only=True):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[ChatChunkChoice]
    # UNSET: no usage key (include_usage off); None: "usage": null on a content chunk.
    usage: Usage | UnsetType | None = UNSET


class CompletionChoice(Struct):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str | None
    stop_reason: str | int | None = None


class Completion(Struct, kw_only=True):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[CompletionChoice]
    usage: Usage | UnsetType | None = UNSET


class ModelCard(Struct):
    id: str
    created: int
    max_model_len: int
    object: str = "model"
    owned_by: str = "enclave"
    root: str | None = None


class ModelList(Struct):
    data: list[ModelCard]
    object: str = "list"


# -- pinned prefixes (/v1/internal/prefixes, for the gateway) ------------------------------

TokenId = Annotated[int, msgspec.Meta(ge=0)]


class PrefixRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """Exactly one of ``messages`` (rendered without the generation prompt), ``prompt``
    (encoded as /v1/completions encodes a string) and ``prompt_token_ids``."""

    model: str | None = None
    messages: Annotated[list[ChatMessage], NOT_EMPTY] | None = None
    prompt: Annotated[str, NOT_EMPTY] | None = None
    prompt_token_ids: Annotated[list[TokenId], NOT_EMPTY] | None = None


class Prefix(Struct, kw_only=True):
    id: str
    object: Literal["prefix"] = "prefix"
    num_tokens: int
    pinned_tokens: int
    pinned_blocks: int
    cached_tokens: int  # of the prompt, cached before this warm-up (no prefill for those)


class PrefixDeleted(Struct, kw_only=True):
    id: str
    object: Literal["prefix"] = "prefix"
    deleted: bool = True
    unpinned_blocks: int


class PrefixSummary(Struct):
    id: str
    num_tokens: int
    pinned_tokens: int
    pinned_blocks: int


class PrefixList(Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[PrefixSummary]
    pinned_blocks: int  # distinct blocks: two prefixes sharing blocks count them once
    max_pinned_blocks: int
