"""Tool calling through the worker's API with the official openai client, on a tiny random
checkpoint whose chat template is Qwen2.5's tool template (Hermes format): forced calls
whose arguments validate, streamed and not, a full round trip, and the 400s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from inference.server.settings import ServerSettings
from tests.inference.checkpoints import claim_token
from tests.inference.grammar.schemas import ARRAYS, NESTED, OPTIONAL, REFS
from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

# The shape of Qwen2.5's template (tools in the system turn, calls as <tool_call> JSON with
# the arguments dict through tojson, tool results as <tool_response> in a user turn).
QWEN_TOOL_TEMPLATE = """\
{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Return <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls is defined %}
<|im_start|>assistant
{{ message.content }}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
<tool_call>
{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

SCHEMAS = {"nested": NESTED, "arrays": ARRAYS, "optional": OPTIONAL, "refs": REFS}
TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "description": f"Record {name}.", "parameters": schema},
    }
    for name, schema in SCHEMAS.items()
]
MESSAGES = [{"role": "user", "content": "Record the defect."}]


@pytest.fixture(scope="module")
def tool_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.inference.checkpoints import make_checkpoint

    directory = make_checkpoint(
        "qwen2", tmp_path_factory.mktemp("tools-qwen2"), max_position_embeddings=4096
    )
    # As in Qwen's tokenizer, the markers are single tokens that are not special.
    for marker in ("<tool_call>", "</tool_call>"):
        claim_token(directory, marker, special=False)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = QWEN_TOOL_TEMPLATE
    config_path.write_text(json.dumps(config))
    engine = tiny_engine(Path(directory), max_model_len=4096, kv_cache_memory_bytes=32 << 20)
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    from inference.server.app import create_app

    with serving(create_app(engine, settings)) as url:
        yield url


@pytest.fixture
def client(tool_worker: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{tool_worker}/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture
def http(tool_worker: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=tool_worker, headers=headers, timeout=120) as client:
        yield client


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_named_function_is_called_with_valid_arguments(client: openai.OpenAI, name: str) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=named(name),
        max_tokens=300, temperature=1.0, seed=3, n=2,
    )  # fmt: skip
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls
        assert calls is not None and len(calls) == 1
        assert calls[0].type == "function" and calls[0].id.startswith("call_")
        assert calls[0].function.name == name
        jsonschema.validate(json.loads(calls[0].function.arguments), SCHEMAS[name])
        assert choice.message.content is None


def test_the_markers_are_written_as_their_single_tokens(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=named("optional"),
        max_tokens=200, temperature=0, logprobs=True,
    )  # fmt: skip
    logprobs = reply.choices[0].logprobs
    assert logprobs and logprobs.content
    tokens = [t.token for t in logprobs.content]
    assert tokens[0] == "<tool_call>" and "</tool_call>" in tokens
    assert reply.choices[0].message.tool_calls


def test_required_calls_one_of_the_tools(client: openai.OpenAI) -> None:
    for seed, parallel in ((1, False), (2, True), (5, True)):
        reply = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=parallel, max_tokens=600, temperature=1.0, seed=seed,
        )  # fmt: skip
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert len(calls) >= 1 and (parallel or len(calls) == 1)
        assert len({c.id for c in calls}) == len(calls)
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_streamed_calls_arrive_as_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=named("nested"),
        max_tokens=300, temperature=0, stream=True,
    )  # fmt: skip
    calls: dict[int, dict[str, Any]] = {}
    finish, num_argument_deltas, content = None, 0, ""
    for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            assert delta.function is not None
            if delta.index not in calls:
                assert delta.id and delta.type == "function" and delta.function.name == "nested"
                assert delta.function.arguments == ""
                calls[delta.index] = {"id": delta.id, "arguments": ""}
            else:
                assert delta.id is None and delta.function.name is None
                calls[delta.index]["arguments"] += delta.function.arguments or ""
                num_argument_deltas += 1
    assert finish == "tool_calls" and content == ""
    assert list(calls) == [0] and num_argument_deltas > 1  # arguments leave as written
    jsonschema.validate(json.loads(calls[0]["arguments"]), NESTED)
    # The same call, not streamed (greedy): the same arguments.
    whole = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=named("nested"),
        max_tokens=300, temperature=0,
    )  # fmt: skip
    assert whole.choices[0].message.tool_calls is not None
    arguments = whole.choices[0].message.tool_calls[0].function.arguments
    assert json.loads(arguments) == json.loads(calls[0]["arguments"])


def test_auto_and_none_leave_free_text(client: openai.OpenAI, http: httpx.Client) -> None:
    for choice in ("auto", "none"):
        reply = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=8,
            temperature=0,
        )  # fmt: skip
        # A random model does not write <tool_call>: its text is content.
        message = reply.choices[0].message
        assert isinstance(message.content, str) and not message.tool_calls
        assert reply.choices[0].finish_reason in ("stop", "length")
    # none: the tools are not offered to the template at all.
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=1)
    offered = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=1
    )
    withheld = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="none", max_tokens=1
    )
    assert plain.usage and offered.usage and withheld.usage
    assert withheld.usage.prompt_tokens == plain.usage.prompt_tokens
    assert offered.usage.prompt_tokens > plain.usage.prompt_tokens + 100
    # /tokenize renders the tools as the chat does.
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS}
    assert http.post("/tokenize", json=body).json()["count"] == offered.usage.prompt_tokens


def test_a_full_round_trip(client: openai.OpenAI, http: httpx.Client) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=named("optional"),
        max_tokens=200, temperature=0,
    )  # fmt: skip
    assistant = first.choices[0].message
    assert assistant.tool_calls
    call = assistant.tool_calls[0]
    history: list[Any] = [
        *MESSAGES,
        assistant.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Recorded as NCR-0042."},
    ]
    final = client.chat.completions.create(
        model=MODEL, messages=history, tools=TOOLS, max_tokens=8, temperature=0
    )
    assert final.choices[0].finish_reason in ("stop", "length")
    assert first.usage and final.usage
    assert final.usage.prompt_tokens > first.usage.prompt_tokens + 10
    # The rendered prompt holds the call (arguments as the template's tojson of a dict) and
    # the tool's result where the template puts them.
    tokens = http.post("/tokenize", json={"model": MODEL, "messages": history}).json()["tokens"]
    text = http.post("/detokenize", json={"tokens": tokens}).json()["prompt"]
    arguments = json.dumps(json.loads(call.function.arguments), ensure_ascii=False)
    assert f'<tool_call>\n{{"name": "optional", "arguments": {arguments}}}\n</tool_call>' in text
    assert "<tool_response>\nRecorded as NCR-0042.\n</tool_response>" in text


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"tool_choice": named("nope")}, "tool_choice", "nope"),
        ({"tool_choice": ["auto"]}, "tool_choice", "Expected"),
        ({"tool_choice": "sometimes"}, "tool_choice", "sometimes"),
        ({"tools": TOOLS[0]}, "tools", "array"),
        ({"tools": []}, "tools", "1 to 128"),
        ({"tools": None, "tool_choice": "required"}, "tool_choice", "requires tools"),
        (
            {"tools": [{"type": "function", "function": {"name": "bad name"}}]},
            "tools[0].function.name",
            "regex",
        ),
        ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type", ""),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "wat"}}}
                ]
            },
            "tools[0].function.parameters",
            "object",
        ),
        (
            {
                "tools": [
                    *TOOLS,
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"a": {"type": "wat"}}},
                        },
                    },
                ]
            },
            "tools[4].function.parameters",
            "wat",
        ),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools[1].function.name", "two tools"),
        (
            {"tool_choice": "required", "response_format": {"type": "json_object"}},
            "tool_choice",
            "response_format",
        ),
        ({"functions": [{"name": "f"}]}, "functions", "tools"),
    ],
)
def test_bad_tool_requests_are_400_naming_the_field(
    http: httpx.Client, fields: dict[str, Any], param: str, says: str
) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "tools": TOOLS, **fields}
    body = {key: value for key, value in body.items() if value is not None}
    reply = http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and says in error["message"], error
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "arguments", ["{oops", "[1]", "[" * 100_000, "{" + '"a":{' * 40 + "}" * 41]
)
def test_bad_tool_history_is_400(http: httpx.Client, arguments: str) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    history = [*MESSAGES, {"role": "assistant", "tool_calls": [call]}]
    reply = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": history, "max_tokens": 2}
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"


def test_auto_streams_free_text_and_its_logprobs_as_without_tools(client: openai.OpenAI) -> None:
    fields: dict[str, Any] = {
        "model": MODEL, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 12,
        "temperature": 0, "logprobs": True,
    }  # fmt: skip
    whole = client.chat.completions.create(**fields)
    content, num_logprobs = "", 0
    for chunk in client.chat.completions.create(**fields, stream=True):
        choice = chunk.choices[0]
        assert not choice.delta.tool_calls
        content += choice.delta.content or ""
        num_logprobs += len(choice.logprobs.content or []) if choice.logprobs else 0
    assert content == whole.choices[0].message.content
    assert num_logprobs == 12 == len(whole.choices[0].logprobs.content or [])  # type: ignore[union-attr]


def test_streamed_choices_each_get_their_calls(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", n=2, seed=7,
        temperature=1.0, max_tokens=600, stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    arguments: dict[tuple[int, int], str] = {}
    names: dict[tuple[int, int], str] = {}
    finishes, usage = {}, None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
            for delta in choice.delta.tool_calls or []:
                assert delta.function is not None
                key = (choice.index, delta.index)
                if delta.function.name:
                    names[key] = delta.function.name
                arguments[key] = arguments.get(key, "") + (delta.function.arguments or "")
    assert finishes == {0: "tool_calls", 1: "tool_calls"}
    assert {index for index, _call in names} == {0, 1} and names.keys() == arguments.keys()
    for key, text in arguments.items():
        jsonschema.validate(json.loads(text), SCHEMAS[names[key]])
    assert usage is not None and usage.completion_tokens > 0
