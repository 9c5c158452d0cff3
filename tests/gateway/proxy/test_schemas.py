"""The /v1 request structs of the OpenAPI document admit exactly what parse() admits."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.domain.proxy.body import parse
from gateway.domain.proxy.openai_errors import ApiError
from gateway.domain.proxy.schemas import ChatCompletionRequest, CompletionRequest

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "m", "prompt": "hi"}
# (endpoint, body): both sides must agree on each. Not listed: 2.0 for an integer, which
# JSON Schema counts as one and the gateway (like the worker) refuses; JSON Schema has no
# way to say "an integer literal".
CASES: list[tuple[str, dict[str, Any]]] = [
    ("chat.completions", CHAT),
    ("chat.completions", {**CHAT, "messages": []}),
    ("chat.completions", {**CHAT, "messages": ["hi"]}),
    ("chat.completions", {**CHAT, "messages": {"role": "user"}}),
    ("chat.completions", {"messages": []}),
    ("chat.completions", {**CHAT, "model": ""}),
    ("chat.completions", {**CHAT, "model": 7}),
    ("chat.completions", {**CHAT, "stream": True, "stream_options": {"include_usage": True}}),
    ("chat.completions", {**CHAT, "stream": "yes"}),
    ("chat.completions", {**CHAT, "stream_options": []}),
    ("chat.completions", {**CHAT, "n": 128, "best_of": 1}),
    ("chat.completions", {**CHAT, "n": 129}),
    ("chat.completions", {**CHAT, "n": 0}),
    ("chat.completions", {**CHAT, "best_of": True}),
    ("chat.completions", {**CHAT, "max_tokens": 2**31 - 1}),
    ("chat.completions", {**CHAT, "max_tokens": 2**31}),
    ("chat.completions", {**CHAT, "max_completion_tokens": 0}),
    ("chat.completions", {**CHAT, "temperature": 0.5, "anything": [1]}),  # the worker's
    ("completions", COMPLETION),
    ("completions", {**COMPLETION, "prompt": [1, 2, 3]}),
    ("completions", {**COMPLETION, "prompt": ["a", [1, 2], "b"]}),
    ("completions", {**COMPLETION, "prompt": []}),
    ("completions", {**COMPLETION, "prompt": ["a"] * 2049}),
    ("completions", {**COMPLETION, "prompt": [[1, "x"]]}),
    ("completions", {**COMPLETION, "prompt": {"text": "hi"}}),
    ("completions", {**COMPLETION, "prompt": 3}),
    ("completions", {"model": "m"}),
    ("completions", {**COMPLETION, "max_tokens": -1}),
]
STRUCTS = {"chat.completions": ChatCompletionRequest, "completions": CompletionRequest}


def documented(endpoint: str, body: dict[str, Any]) -> bool:
    """Whether the document's JSON schema for ``endpoint`` admits ``body``."""
    import jsonschema_rs

    (schema,), components = msgspec.json.schema_components(
        [STRUCTS[endpoint]], ref_template="#/$defs/{name}"
    )
    return bool(jsonschema_rs.validator_for({**schema, "$defs": components}).is_valid(body))


@pytest.mark.parametrize(("endpoint", "body"), CASES)
def test_the_document_admits_what_the_gateway_admits(endpoint: str, body: dict[str, Any]) -> None:
    try:
        parse(endpoint, msgspec.json.encode(body))
        accepted = True
    except ApiError as error:
        assert error.status == 400
        accepted = False
    assert documented(endpoint, body) == accepted
