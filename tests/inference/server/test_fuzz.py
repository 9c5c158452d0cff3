"""Schemathesis against the worker's own OpenAPI document, on a tiny random checkpoint."""

from __future__ import annotations

import schemathesis

from tests.fuzz import fuzz, served_model
from tests.inference.server.conftest import API_KEY, MODEL

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def test_the_worker_holds_to_its_document(worker_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{worker_url}/openapi.json", headers=AUTH)
    aim = served_model(MODEL)

    def prepare(case: schemathesis.Case) -> dict[str, str]:
        aim(case)
        return AUTH

    failures = fuzz(schema, prepare, max_examples=25)
    assert not failures, "\n\n".join(failures)
