"""Tool calling through a real gateway to a real worker on a tiny random model: tools and
tool_choice pass through unchanged, forced calls come back (streamed and not) with
arguments that validate, the worker's 400s come back as they are, tool requests are counted
by tool_choice and their calls audited, and the tools count in the prompt's token
estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from gateway.domain.proxy.body import parse_body
from gateway.domain.proxy.constraints import tool_choice_kind
from tests.gateway.traffic.conftest import running_gateway
from tests.inference.grammar.schemas import NESTED
from tests.inference.server.conftest import MODEL, metric

MESSAGES: Any = [{"role": "user", "content": "File the report."}]
TOOLS: Any = [{"type": "function", "function": {"name": "file_ncr", "parameters": NESTED}}]
NAMED: Any = {"type": "function", "function": {"name": "file_ncr"}}


def test_tool_calls_pass_through_and_are_counted(tmp_path: Path, worker: str) -> None:
    with running_gateway(tmp_path, [worker]) as gateway:
        client = gateway.client(gateway.department("quality", audit_bodies=True))
        reply = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=NAMED, max_tokens=200,
            temperature=0,
        )  # fmt: skip
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        call = choice.message.tool_calls[0]
        assert call.function.name == "file_ncr"
        jsonschema.validate(json.loads(call.function.arguments), NESTED)
        arguments, finish = "", None
        stream = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=200,
            temperature=0, stream=True, parallel_tool_calls=False,
        )  # fmt: skip
        for chunk in stream:
            if not chunk.choices:
                continue
            for delta in chunk.choices[0].delta.tool_calls or []:
                assert delta.function is not None
                arguments += delta.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls"
        assert json.loads(arguments) == json.loads(call.function.arguments)
        # The round trip: the call and its result in the history.
        history = [
            *MESSAGES,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "NCR-0042"},
        ]
        final = client.chat.completions.create(
            model=MODEL, messages=history, tools=TOOLS, max_tokens=4
        )
        assert final.choices[0].finish_reason in ("stop", "length")
        # The worker's refusal reaches the client as the worker wrote it.
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=4,
                tool_choice={"type": "function", "function": {"name": "nope"}},
            )  # fmt: skip
        error: Any = caught.value.body
        assert error["param"] == "tool_choice" and "nope" in error["message"]
        # Audited: the streamed reply's call is kept as its name and arguments.
        records = gateway.audit_records(4)
        streamed = [r["response_body"] for r in records if r["streamed"]]
        assert streamed == [f"\n[tool_call file_ncr] {arguments}"]
        assert '"tool_calls"' in records[0]["response_body"]
        page = httpx.get(f"{gateway.url}/metrics").text
        name = "enclave_gateway_tool_requests_total"
        assert metric(page, name, tool_choice="named") == 2
        assert metric(page, name, tool_choice="required") == 1
        assert metric(page, name, tool_choice="auto") == 1


def test_tool_choice_kind_and_the_prompt_estimate() -> None:
    assert tool_choice_kind({"messages": []}) is None
    assert tool_choice_kind({"tools": TOOLS}) == "auto"
    assert tool_choice_kind({"tools": TOOLS, "tool_choice": "none"}) == "none"
    assert tool_choice_kind({"tools": TOOLS, "tool_choice": NAMED}) == "named"
    assert tool_choice_kind({"tools": TOOLS, "tool_choice": ["auto"]}) == "invalid"
    bare = parse_body("chat.completions", {"model": MODEL, "messages": MESSAGES})
    offered = parse_body("chat.completions", {"model": MODEL, "messages": MESSAGES, "tools": TOOLS})
    withheld = parse_body(
        "chat.completions",
        {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "none"},
    )
    assert offered.estimated_prompt_tokens() > bare.estimated_prompt_tokens() + 100
    assert withheld.estimated_prompt_tokens() == bare.estimated_prompt_tokens()
