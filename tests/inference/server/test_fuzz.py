"""Schemathesis against the worker's own OpenAPI document, on a tiny random checkpoint."""

from __future__ import annotations

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
        ],
        AUTH,
    )
    assert not failures, "\n\n".join(failures)
