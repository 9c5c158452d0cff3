"""GET /openapi.json describes every route and what the POST routes accept, behind the token."""

from __future__ import annotations

import re
from typing import Any

import httpx
import msgspec
import pytest

from inference.server import protocol
from inference.server.app import create_app
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import API_KEY, MODEL

OPEN = {"/health", "/ready", "/metrics"}
BODIES = {
    "/v1/completions": ("CompletionRequest", protocol.CompletionRequest),
    "/v1/chat/completions": ("ChatCompletionRequest", protocol.ChatCompletionRequest),
    "/tokenize": ("TokenizeRequest", protocol.TokenizeRequest),
    "/detokenize": ("DetokenizeRequest", protocol.DetokenizeRequest),
}


@pytest.fixture(scope="module")
def document(worker_url: str) -> dict[str, Any]:
    reply = httpx.get(f"{worker_url}/openapi.json", headers={"Authorization": f"Bearer {API_KEY}"})
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    parsed: dict[str, Any] = reply.json()
    return parsed


def test_it_needs_the_token(worker_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        reply = httpx.get(f"{worker_url}/openapi.json", headers=headers)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"


def test_every_route_is_described(document: dict[str, Any]) -> None:
    app = create_app(lambda: None, ServerSettings(served_model_name=MODEL, api_key=API_KEY))
    routes: dict[str, set[str]] = {}
    for route in app.app.routes:
        # Litestar spells a path parameter with its type ({pin_id:str}); OpenAPI without.
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        routes[path] = {m.lower() for m in route.methods} - {"options", "head"}  # type: ignore[attr-defined]
    described = {path: set(operations) for path, operations in document["paths"].items()}
    assert described == routes
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert document["security"] == [{"bearer": []}]
    for path, operations in document["paths"].items():
        for operation in operations.values():
            # Open paths say so; every other one inherits the bearer requirement.
            assert ("security" in operation) == (path in OPEN), path
            if path in OPEN:
                assert operation["security"] == []


def test_request_bodies_are_the_structs_the_handlers_decode(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for path, (name, struct) in BODIES.items():
        body = document["paths"][path]["post"]["requestBody"]
        assert body["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{name}"
        }
        schema = schemas[name]
        fields = msgspec.structs.fields(struct)
        assert set(schema["properties"]) == {f.name for f in fields}, path
        assert set(schema.get("required", [])) == {f.name for f in fields if f.required}, path
        assert schema["additionalProperties"] is False  # unknown fields are a 400
        assert "401" in document["paths"][path]["post"]["responses"]


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    refs = _refs(document)
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs)
    assert {ref.rsplit("/", 1)[1] for ref in refs} <= set(schemas)


def test_a_body_with_only_the_required_fields_is_accepted(
    document: dict[str, Any], worker_url: str
) -> None:
    samples = {"string": "Hi", "integer": 5}
    schemas = document["components"]["schemas"]
    headers = {"Authorization": f"Bearer {API_KEY}"}
    for path, (name, _) in BODIES.items():
        schema = schemas[name]
        body: dict[str, Any] = {}
        for field in schema.get("required", []):
            body[field] = _sample(schema["properties"][field], schemas, samples)
        if "model" in body:
            body["model"] = MODEL
        if path == "/tokenize":
            body["prompt"] = "Hi"  # one of prompt and messages, neither required alone
        reply = httpx.post(f"{worker_url}{path}", json=body, headers=headers, timeout=60)
        assert reply.status_code == 200, (path, body, reply.text)


def _sample(schema: dict[str, Any], schemas: dict[str, Any], samples: dict[str, Any]) -> Any:
    if "$ref" in schema:
        target = schemas[schema["$ref"].rsplit("/", 1)[1]]
        return {k: _sample(target["properties"][k], schemas, samples) for k in target["required"]}
    if "anyOf" in schema:
        return _sample(schema["anyOf"][0], schemas, samples)
    if "enum" in schema:
        return schema["enum"][0]
    if schema["type"] == "array":
        item = _sample(schema.get("items", {"type": "integer"}), schemas, samples)
        return [{**item, "role": "user"} if isinstance(item, dict) else item]
    return samples[schema["type"]]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []
