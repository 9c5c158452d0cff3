"""GET /openapi.json: the worker's API as OpenAPI 3.1, built from the msgspec structs.

The handlers read raw bytes and decode them with msgspec themselves (so that every
rejection is OpenAI's error body), which leaves Litestar nothing to describe; the
document is written here instead, from the same structs the handlers decode with, so it
cannot drift from what they accept.
"""

from __future__ import annotations

from typing import Any

import msgspec

from inference import __version__
from inference.server.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    ModelList,
    Prefix,
    PrefixDeleted,
    PrefixList,
    PrefixRequest,
    TokenizeRequest,
    TokenizeResponse,
)

_REF = "#/components/schemas/{name}"
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
# A stream is described per event (as schemathesis and OpenAPI 3.2's itemSchema read it):
# each event's data is a chunk as JSON, an error body, or "[DONE]" last.
_SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
}
_TEXT = {"type": "string"}
# What worker.py's _weight_of takes: a plain decimal (up to 6 places) from 1 to 1000.
TENANT_WEIGHT_SCHEMA = {
    "type": "string",
    "pattern": r"^(1000(\.0{1,6})?|[1-9][0-9]{0,2}(\.[0-9]{1,6})?)$",
}
_HEADERS = [
    ("X-Request-Id", _TEXT, "Echoed on the response; a new id is made when none comes."),
    ("X-Enclave-Tenant", _TEXT, "The tenant the scheduler shares the engine between."),
    (
        "X-Enclave-Tenant-Weight",
        TENANT_WEIGHT_SCHEMA,
        "That tenant's scheduling weight (default 1).",
    ),
    ("traceparent", _TEXT, "W3C trace context, continued by the worker's span."),
]


def openapi_document() -> bytes:
    structs: list[Any] = [
        CompletionRequest, Completion, ChatCompletionRequest, ChatCompletion,
        TokenizeRequest, TokenizeResponse, DetokenizeRequest, DetokenizeResponse, ModelList,
        PrefixRequest, Prefix, PrefixDeleted, PrefixList,
    ]  # fmt: skip
    _, components = msgspec.json.schema_components(structs, ref_template=_REF)
    components["Error"] = _ERROR
    generation_headers = [
        {"name": name, "in": "header", "required": False, "schema": schema,
         "description": description}
        for name, schema, description in _HEADERS
    ]  # fmt: skip
    document = {
        "openapi": "3.1.0",
        "info": {"title": "Enclave inference worker", "version": __version__},
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/completions": {
                "post": _post("CompletionRequest", "Completion", generation_headers, sse=True)
            },
            "/v1/chat/completions": {
                "post": _post(
                    "ChatCompletionRequest", "ChatCompletion", generation_headers, sse=True
                )
            },
            "/tokenize": {"post": _post("TokenizeRequest", "TokenizeResponse", [])},
            "/detokenize": {"post": _post("DetokenizeRequest", "DetokenizeResponse", [])},
            "/v1/models": {"get": {"responses": _responses(_json("ModelList"))}},
            "/v1/internal/prefixes": {
                "post": _with(
                    _post("PrefixRequest", "Prefix", generation_headers[1:3]),
                    "409",
                    "Pinning would pass the cap (code pin_capacity_exceeded)",
                ),
                "get": {"responses": _responses(_json("PrefixList"))},
            },
            "/v1/internal/prefixes/{pin_id}": {
                "delete": _with(
                    {
                        "parameters": [
                            {"name": "pin_id", "in": "path", "required": True, "schema": _TEXT}
                        ],
                        "responses": _responses(_json("PrefixDeleted")),
                    },
                    "404",
                    "No pinned prefix has this id",
                )
            },
            "/health": _probe("200 while the process is alive"),
            "/ready": _probe("Takes requests", not_ready="Loading, draining or failed"),
            "/metrics": _probe("Prometheus text format", media_type="text/plain"),
            "/openapi.json": {"get": {"responses": _responses({"application/json": {}})}},
        },
    }
    return msgspec.json.encode(document)


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(name=name)}}}


def _responses(ok: dict[str, Any]) -> dict[str, Any]:
    error = {"content": _json("Error")}
    return {
        "200": {"description": "OK", "content": ok},
        "400": {"description": "A parameter to fix; `param` names it", **error},
        "401": {"description": "Missing or wrong bearer token", **error},
        "503": {"description": "Loading, draining or overloaded (Retry-After)", **error},
    }


def _with(operation: dict[str, Any], status: str, description: str) -> dict[str, Any]:
    """``operation`` with one more error answer (OpenAI's error body)."""
    operation["responses"][status] = {"description": description, "content": _json("Error")}
    return operation


def _post(
    request: str, response: str, headers: list[dict[str, Any]], *, sse: bool = False
) -> dict[str, Any]:
    ok = _json(response)
    if sse:  # with "stream": true, server-sent events ending in "data: [DONE]"
        ok["text/event-stream"] = {"schema": _SSE_EVENT}
    return {
        "parameters": headers,
        "requestBody": {"required": True, "content": _json(request)},
        "responses": _responses(ok),
    }


def _probe(
    description: str, media_type: str = "application/json", not_ready: str | None = None
) -> dict[str, Any]:
    responses = {"200": {"description": description, "content": {media_type: {}}}}
    if not_ready is not None:
        responses["503"] = {"description": not_ready, "content": {media_type: {}}}
    # security []: open, as probes and Prometheus carry no token.
    return {"get": {"security": [], "responses": responses}}
