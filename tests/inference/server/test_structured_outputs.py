"""Structured outputs through the worker's API: response_format and vLLM's guided_* fields,
streamed and not, the official openai client's parse(), and the 400s."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from inference.text.tokenizer import Tokenizer
from tests.inference.grammar.schemas import ALL, NESTED
from tests.inference.server.conftest import API_KEY, MODEL

MESSAGES = [{"role": "user", "content": "Write the nonconformance report."}]


class Person(BaseModel):
    name: Annotated[str, Field(max_length=8)]
    role: Literal["operator", "engineer"]


class Report(BaseModel):
    part: Annotated[str, Field(max_length=8)]
    severity: Literal["low", "medium", "high"]
    depth_um: Annotated[int, Field(ge=0, le=500)]
    inspector: Person  # a $ref into $defs in the schema pydantic writes


def chat(http: httpx.Client, **fields: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 200, **fields}
    return http.post("/v1/chat/completions", json=body)


def json_schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "report", "schema": schema}}


@pytest.mark.parametrize("name", sorted(ALL))
def test_chat_with_a_json_schema_validates(http: httpx.Client, name: str) -> None:
    reply = chat(http, response_format=json_schema_format(ALL[name]), n=2, temperature=1.0, seed=4)
    assert reply.status_code == 200, reply.text
    for choice in reply.json()["choices"]:
        assert choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["message"]["content"]), ALL[name])


def test_completions_take_guided_fields(http: httpx.Client) -> None:
    def complete(**fields: Any) -> list[str]:
        body = {"model": MODEL, "prompt": ["Part", "Status"], "max_tokens": 120, **fields}
        reply = http.post("/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        return [c["text"] for c in reply.json()["choices"]]

    for text in complete(guided_json=NESTED, temperature=0):
        jsonschema.validate(json.loads(text), NESTED)
    for text in complete(guided_regex=r"NCR-[0-9]{4}", temperature=1.0, seed=9):
        assert re.fullmatch(r"NCR-[0-9]{4}", text)
    assert set(complete(guided_choice=["open", "closed"], temperature=1.0)) <= {"open", "closed"}
    lark = 'start: "depth " NUM " um"\nNUM: /[1-9][0-9]?/'
    for text in complete(guided_grammar=lark, temperature=1.0):
        assert re.fullmatch(r"depth [1-9][0-9]? um", text)
    # response_format on completions too, as vLLM takes it.
    for text in complete(response_format=json_schema_format(NESTED), temperature=0):
        jsonschema.validate(json.loads(text), NESTED)


def test_json_object_mode_writes_an_object(http: httpx.Client, checkpoint: Path) -> None:
    # A random model could fill an unbounded object for ever: a bias toward "}" closes it as
    # soon as the grammar lets it, which the mask does only after "{".
    close = Tokenizer.from_dir(checkpoint).encode("}", add_special_tokens=False)
    bias = {str(close[0]): 100}
    reply = chat(http, response_format={"type": "json_object"}, logit_bias=bias, temperature=0)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert json.loads(choice["message"]["content"]) == {}
    assert choice["finish_reason"] == "stop"


def test_streamed_constrained_text_validates(http: httpx.Client) -> None:
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 200,
        "stream": True,
        "temperature": 0,
        "response_format": json_schema_format(NESTED),
    }
    text, finish = "", None
    with http.stream("POST", "/v1/chat/completions", json=body) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            text += choice["delta"].get("content", "")
            finish = choice["finish_reason"] or finish
    jsonschema.validate(json.loads(text), NESTED)
    assert finish == "stop"


def test_max_tokens_cut_says_length(http: httpx.Client) -> None:
    reply = chat(http, response_format=json_schema_format(NESTED), max_tokens=4)
    assert reply.json()["choices"][0]["finish_reason"] == "length"


def test_openai_client_parse_returns_the_model_object(worker_url: str) -> None:
    client = openai.OpenAI(base_url=f"{worker_url}/v1", api_key=API_KEY, max_retries=0)
    for seed in (1, 2):
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Report the defect."}],
            response_format=Report,
            max_tokens=200,
            seed=seed,
        )
        parsed = completion.choices[0].message.parsed
        assert isinstance(parsed, Report) and isinstance(parsed.inspector, Person)


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        (
            {"response_format": json_schema_format({"type": "object", "not": {}})},
            "response_format",
            "not",
        ),
        (
            {"response_format": json_schema_format({"properties": {"a": {"$ref": "#/$defs/x"}}})},
            "response_format",
            "/$defs/x",
        ),
        ({"response_format": json_schema_format({"type": "wat"})}, "response_format", "wat"),
        ({"guided_regex": "([0-9]"}, "guided_regex", "regex"),
        ({"guided_grammar": "start: missing_rule"}, "guided_grammar", "missing_rule"),
        ({"guided_grammar": 'start: "x" start'}, "guided_grammar", "Too many items"),
        (
            {"response_format": {"type": "json_object"}, "guided_choice": ["a"]},
            "guided_choice",
            "only one",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
    ],
)
def test_unusable_constraints_are_400_saying_why(
    http: httpx.Client, fields: dict[str, Any], param: str, says: str
) -> None:
    reply = chat(http, **fields)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and says in error["message"], error
    assert error["type"] == "invalid_request_error"
