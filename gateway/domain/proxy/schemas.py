"""What the gateway's OpenAI API accepts, as msgspec structs, for its OpenAPI document.

These describe the fields the gateway itself checks before it forwards a request
(`body.py`, `request_params.py`); the worker checks every other field, so the structs
admit fields they do not name. They are the document's source only: the handlers read
raw bytes and answer every rejection in OpenAI's error body themselves. Kept in step with
the checks by tests/gateway/proxy/test_schemas.py.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gateway.domain.proxy.request_params import (
    MAX_COMPLETION_TOKENS,
    MAX_PROMPTS,
    MAX_SEQUENCES,
)

Model = Annotated[str, msgspec.Meta(min_length=1, description="A model GET /v1/models lists")]
Sequences = Annotated[int, msgspec.Meta(ge=1, le=MAX_SEQUENCES)]
Tokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_COMPLETION_TOKENS)]
_TOKEN_IDS = {"type": "array", "items": {"type": "integer"}}
# msgspec cannot describe a union of two array types, so this one is written out.
Prompt = Annotated[
    Any,
    msgspec.Meta(
        extra_json_schema={
            "anyOf": [
                {"type": "string"},
                {**_TOKEN_IDS, "minItems": 1},
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_PROMPTS,
                    "items": {"anyOf": [{"type": "string"}, _TOKEN_IDS]},
                },
            ],
            "description": "A string, token ids, or a batch of either",
        }
    ),
]


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class ChatCompletionRequest(msgspec.Struct):
    model: Model
    messages: list[dict[str, Any]]
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Sequences | None = None
    best_of: Sequences | None = None
    max_tokens: Tokens | None = None
    max_completion_tokens: Tokens | None = None


class CompletionRequest(msgspec.Struct):
    model: Model
    prompt: Prompt
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Sequences | None = None
    best_of: Sequences | None = None
    max_tokens: Tokens | None = None
