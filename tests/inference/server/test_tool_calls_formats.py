"""Llama 3's and Mistral's tool-call formats end to end: a worker whose chat template is in
that family's shape writes forced calls in its format (the grammar), and they come back
as tool_calls, streamed (arguments as written) and not; the history renders the calls in
the template's form."""

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
from tests.inference.grammar.schemas import ARRAYS, NESTED
from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

# Llama 3.1's shape: tools as JSON in the first user turn, a call as {"name", "parameters"},
# a tool result in an ipython turn.
LLAMA3_TEMPLATE = """\
{{- bos_token }}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls is defined %}
{%- set tool_call = message.tool_calls[0].function %}
<|start_header_id|>assistant<|end_header_id|>

{"name": "{{ tool_call.name }}", "parameters": {{ tool_call.arguments | tojson }}}<|eot_id|>
{%- elif message.role == "tool" %}
<|start_header_id|>ipython<|end_header_id|>

{{ message.content }}<|eot_id|>
{%- else %}
<|start_header_id|>{{ message.role }}<|end_header_id|>

{%- if tools and loop.first %}
Respond with {"name": function name, "parameters": dictionary of argument name and value}.
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}
{%- endif %}
{{ message.content }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

# Mistral's shape: [AVAILABLE_TOOLS] before the last user turn, calls as [TOOL_CALLS] and a
# JSON array, results in [TOOL_RESULTS].
MISTRAL_TEMPLATE = """\
{{- bos_token }}
{%- for message in messages %}
{%- if message.role == "user" %}
{%- if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
[INST]{{ message.content }}[/INST]
{%- elif message.role == "assistant" and message.tool_calls is defined %}
[TOOL_CALLS][
{%- for c in message.tool_calls %}
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
{{- ", " if not loop.last }}
{%- endfor %}]{{ eos_token }}
{%- elif message.role == "tool" %}
[TOOL_RESULTS]{"content": {{ message.content | tojson }}}[/TOOL_RESULTS]
{%- else %}
{{ message.content }}{{ eos_token }}
{%- endif %}
{%- endfor %}"""

TOOLS = [
    {"type": "function", "function": {"name": "nested", "parameters": NESTED}},
    {"type": "function", "function": {"name": "arrays", "parameters": ARRAYS}},
]
SCHEMAS = {"nested": NESTED, "arrays": ARRAYS}
MESSAGES = [{"role": "user", "content": "Record the defect."}]


@pytest.fixture(scope="module", params=["llama3", "mistral"])
def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    from inference.server.app import create_app
    from tests.inference.checkpoints import make_checkpoint

    kind = "llama3" if request.param == "llama3" else "mistral"
    directory = make_checkpoint(
        kind, tmp_path_factory.mktemp(f"tools-{kind}"), max_position_embeddings=4096
    )
    if request.param == "mistral":
        claim_token(directory, "[TOOL_CALLS]", special=True)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = LLAMA3_TEMPLATE if request.param == "llama3" else MISTRAL_TEMPLATE
    config_path.write_text(json.dumps(config))
    engine = tiny_engine(Path(directory), max_model_len=4096, kv_cache_memory_bytes=32 << 20)
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_app(engine, settings)) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0)


def test_forced_calls_come_back_as_tool_calls(client: openai.OpenAI) -> None:
    for choice, parallel, seed in (
        ("required", True, 1),
        ("required", False, 2),
        ("arrays", True, 3),
    ):
        tool_choice: Any = choice
        if choice != "required":
            tool_choice = {"type": "function", "function": {"name": choice}}
        reply = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice,
            parallel_tool_calls=parallel, max_tokens=600, temperature=1.0, seed=seed,
        )  # fmt: skip
        result = reply.choices[0]
        assert result.finish_reason == "tool_calls", result
        assert reply.usage is not None
        calls = result.message.tool_calls or []
        assert calls and (parallel or len(calls) == 1)
        for call in calls:
            assert choice == "required" or call.function.name == choice
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_streamed_calls_match_the_whole_reply(client: openai.OpenAI) -> None:
    fields: dict[str, Any] = {
        "model": MODEL, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 400,
        "tool_choice": {"type": "function", "function": {"name": "nested"}}, "temperature": 0,
    }  # fmt: skip
    whole = client.chat.completions.create(**fields)
    assert whole.choices[0].message.tool_calls
    expected = json.loads(whole.choices[0].message.tool_calls[0].function.arguments)
    arguments, names, finish, num_deltas = "", [], None, 0
    for chunk in client.chat.completions.create(**fields, stream=True):
        for delta in chunk.choices[0].delta.tool_calls or []:
            assert delta.index == 0 and delta.function is not None
            if delta.function.name:
                names.append(delta.function.name)
            arguments += delta.function.arguments or ""
            num_deltas += 1
        finish = chunk.choices[0].finish_reason or finish
    assert names == ["nested"] and finish == "tool_calls"
    assert json.loads(arguments) == expected
    assert num_deltas > 3  # the arguments left as they were written, not all at the end


def test_the_round_trip_renders(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=400, temperature=0,
    )  # fmt: skip
    message = first.choices[0].message
    assert message.tool_calls
    history: list[Any] = [
        *MESSAGES,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "done"},
        {"role": "user", "content": "Thanks."},
    ]
    final = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=4)
    assert first.usage and final.usage
    assert final.usage.prompt_tokens > first.usage.prompt_tokens
    # The template wrote the call in its own form, its arguments a dict through tojson.
    base = str(client.base_url).removesuffix("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"model": MODEL, "messages": history}
    tokens = httpx.post(f"{base}/tokenize", json=body, headers=headers).json()["tokens"]
    reply = httpx.post(f"{base}/detokenize", json={"tokens": tokens}, headers=headers)
    text = reply.json()["prompt"]
    call = message.tool_calls[0].function
    arguments = json.dumps(json.loads(call.arguments), ensure_ascii=False)
    key = "parameters" if "<|eot_id|>" in text else "arguments"
    assert f'{{"name": "{call.name}", "{key}": {arguments}}}' in text
    assert "done" in text


def test_mistral_calls_open_with_the_special_token(
    client: openai.OpenAI, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.params["client"] != "mistral":
        pytest.skip("Mistral's marker only")
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=400,
        temperature=0, logprobs=True,
    )  # fmt: skip
    assert reply.choices[0].logprobs and reply.choices[0].logprobs.content
    # One token, the special one (spelt in ordinary tokens the model would read it as text).
    assert reply.choices[0].logprobs.content[0].token == "[TOOL_CALLS]"
    assert reply.choices[0].message.tool_calls
