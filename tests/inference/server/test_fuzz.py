"""Schemathesis against the worker's own OpenAPI document, on a tiny random checkpoint."""

from __future__ import annotations

import httpx
import schemathesis

from tests.fuzz import check_cases, fuzz, served_model
from tests.inference.server.conftest import API_KEY, MODEL

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def test_the_worker_holds_to_its_document(worker_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{worker_url}/openapi.json", headers=AUTH)
    aim = served_model(MODEL)

    def prepare(case: schemathesis.Case) -> dict[str, str]:
        aim(case)
        return AUTH

    try:
        failures = fuzz(schema, prepare, max_examples=25)
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        completion = {"model": MODEL, "prompt": ["hi", [1, 2]], "max_tokens": 4, "n": 2}
        usage = {"stream": True, "stream_options": {"include_usage": True}}
        failures += check_cases(
            schema,
            [
                ("POST", "/v1/chat/completions", chat),
                ("POST", "/v1/chat/completions", {**chat, **usage}),
                ("POST", "/v1/completions", completion),
                ("POST", "/v1/completions", {**completion, **usage, "logprobs": 2}),
                ("POST", "/tokenize", {"model": MODEL, "messages": chat["messages"]}),
                ("POST", "/v1/internal/prefixes", {"messages": chat["messages"]}),
            ],
            AUTH,
        )
    finally:
        unpin_all(worker_url)
    assert not failures, "\n\n".join(failures)


def unpin_all(worker_url: str) -> None:
    """The pins made here would hold blocks of the session's worker for the tests after."""
    listing = httpx.get(f"{worker_url}/v1/internal/prefixes", headers=AUTH).json()
    for prefix in listing["data"]:
        reply = httpx.delete(f"{worker_url}/v1/internal/prefixes/{prefix['id']}", headers=AUTH)
        assert reply.status_code == 200
