"""Structured outputs through a real gateway to a real worker on a tiny random model: the
fields pass through unchanged, the official client's parse() works, the worker's 400s come
back as they are, and the gateway counts constrained requests by kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from gateway.domain.proxy.constraints import constraint_kind
from tests.gateway.traffic.conftest import running_gateway
from tests.inference.grammar.schemas import NESTED
from tests.inference.server.conftest import MODEL, metric

MESSAGES: Any = [{"role": "user", "content": "File the report."}]


class Finding(BaseModel):
    part: Annotated[str, Field(max_length=8)]
    verdict: Literal["accept", "rework", "scrap"]


def test_constraints_pass_through_and_are_counted(tmp_path: Path, worker: str) -> None:
    with running_gateway(tmp_path, [worker]) as gateway:
        client = gateway.client(gateway.department("quality"))
        parsed = client.chat.completions.parse(
            model=MODEL, messages=MESSAGES, response_format=Finding, max_tokens=100, seed=3
        )
        assert isinstance(parsed.choices[0].message.parsed, Finding)
        reply = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=200,
            temperature=0,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "ncr", "schema": NESTED, "strict": True},
            },
        )
        jsonschema.validate(json.loads(reply.choices[0].message.content or ""), NESTED)
        regex = client.completions.create(
            model=MODEL, prompt="Lot", max_tokens=20, extra_body={"guided_regex": "L[0-9]{3}"}
        )
        assert len(regex.choices[0].text) == 4 and regex.choices[0].text.startswith("L")
        free = client.completions.create(model=MODEL, prompt="Lot", max_tokens=2)
        assert free.choices[0].finish_reason == "length"
        # The worker's refusal reaches the client as the worker wrote it.
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                extra_body={"guided_regex": "(", "guided_choice": ["a"]},
            )
        error: Any = caught.value.body
        assert error["param"] == "guided_choice" and "only one" in error["message"]
        page = httpx.get(f"{gateway.url}/metrics").text
        name = "enclave_gateway_constrained_requests_total"
        assert metric(page, name, kind="json_schema") == 2
        assert metric(page, name, kind="regex") == 1
        assert metric(page, name, kind="several") == 1
        assert metric(page, name, kind="json_object") == 0


def test_constraint_kind_names_what_the_worker_will_compile() -> None:
    assert constraint_kind({"response_format": {"type": "text"}}) is None
    assert constraint_kind({"response_format": {"type": "json_object"}}) == "json_object"
    assert constraint_kind({"response_format": "json"}) is None
    assert constraint_kind({"guided_json": {"type": "object"}}) == "json_schema"
    assert constraint_kind({"guided_choice": ["a"]}) == "choice"
    assert constraint_kind({"guided_grammar": "start: x", "guided_regex": "x"}) == "several"
    assert constraint_kind({"messages": []}) is None
