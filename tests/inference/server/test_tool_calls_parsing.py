"""The tool-call parsers (tool_calls.py) and their streaming form (tool_stream.py): each
format, malformed output kept as content, and the stream adding up to what the one-shot
parser returns whatever the chunking."""

from __future__ import annotations

import json

import pytest

from inference.server.tool_calls import format_of, parse
from inference.server.tool_stream import ToolStreamer

HERMES = (
    "Let me check.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "d": {"x": [1, "}"]}}}'
    '\n</tool_call>\n<tool_call>{"name":"b","arguments":{}}</tool_call>'
)
LLAMA = '{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {"s": "x;y"}}'
MISTRAL = 'hi [TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]'


def calls_of(text: str, fmt: str) -> tuple[str | None, list[tuple[str, object]]]:
    parsed = parse(text, fmt)  # type: ignore[arg-type]
    return parsed.content, [(c.name, json.loads(c.arguments)) for c in parsed.calls]


def test_hermes_calls_and_the_text_around_them() -> None:
    content, calls = calls_of(HERMES, "hermes")
    assert content == "Let me check."
    assert calls == [("get_weather", {"city": "Paris", "d": {"x": [1, "}"]}}), ("b", {})]


def test_hermes_arguments_written_as_json_text_and_an_unclosed_last_call() -> None:
    text = (
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": 2}"}</tool_call>'
        '<tool_call>{"name": "g", "arguments": {}}'
    )
    assert calls_of(text, "hermes") == (None, [("f", {"a": 2}), ("g", {})])


def test_llama3_calls_with_and_without_the_python_tag() -> None:
    assert calls_of(LLAMA, "llama3") == (None, [("f", {"a": 1}), ("g", {"s": "x;y"})])
    tagged = '<|python_tag|>{"name": "f", "parameters": {"a": 1}}'
    assert calls_of(tagged, "llama3") == (None, [("f", {"a": 1})])


def test_mistral_array_and_v11_forms() -> None:
    assert calls_of(MISTRAL, "mistral") == ("hi", [("f", {"a": 1}), ("g", {})])
    v11 = '[TOOL_CALLS]f[ARGS]{"a": 1}[TOOL_CALLS]g[ARGS]{}'
    assert calls_of(v11, "mistral") == (None, [("f", {"a": 1}), ("g", {})])


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ('<tool_call>{"name": broken</tool_call>', "hermes"),
        ('<tool_call>{"arguments": {}}</tool_call>', "hermes"),  # no name
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "hermes"),
        ("Hello {there}", "llama3"),
        ('{"name": "f", "parameters": {"a": 1}} trailing words', "llama3"),
        ('[TOOL_CALLS][{"name": "f", "arguments": {}}', "mistral"),  # cut short
        ("[TOOL_CALLS]f{}", "mistral"),
        ("plain words", "mistral"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "hermes"),  # RecursionError
        ("{" + '"a":[' * 100_000, "llama3"),
        ('<tool_call>{"name": "f\\x", "arguments": {}}</tool_call>', "hermes"),  # bad escape
    ],
)
def test_malformed_output_is_content(text: str, fmt: str) -> None:
    assert calls_of(text, fmt) == (text, [])


def test_the_format_is_read_from_the_template() -> None:
    assert format_of("{{ '<tool_call>' }}{{ tools | tojson }}") == "hermes"
    assert format_of("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert format_of("<|python_tag|>{{ x }}<|eot_id|>") == "llama3"
    assert format_of('{{ "parameters" }}<|eot_id|>') == "llama3"
    assert format_of("{{ messages }}") == "hermes"  # no markers: the most common format
    assert format_of(None) == "hermes"


def streamed(text: str, fmt: str, step: int) -> tuple[str, dict[int, tuple[str, str, str]]]:
    streamer = ToolStreamer(fmt)  # type: ignore[arg-type]
    events = []
    for i in range(0, len(text), step):
        events += streamer.feed(text[i : i + step])
    events += streamer.finish()
    content, calls = "", {}
    for event in events:
        if isinstance(event, str):
            content += event
            continue
        if event.index not in calls:  # the first delta: id, type, name and "" arguments
            assert isinstance(event.id, str) and event.id.startswith("call_")
            assert event.type == "function" and event.function.arguments == ""
            calls[event.index] = (event.id, event.function.name, "")
        else:
            assert not isinstance(event.id, str)  # later deltas carry arguments only
            call_id, name, arguments = calls[event.index]
            calls[event.index] = (call_id, name, arguments + event.function.arguments)
    assert streamer.num_calls == len(calls)
    return content, calls


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        (HERMES, "hermes"),
        (LLAMA, "llama3"),
        (MISTRAL, "mistral"),
        ("a <tool_call>{bad</tool_call> b", "hermes"),
        ("plain text < with <tool stuff", "hermes"),
        ("  Hello {x}", "llama3"),
        ('<tool_call>{"arguments": {"a": 1}, "name": "late"}</tool_call>', "hermes"),
        ('<tool_call>{"name": "f\\x", "arguments": {}}</tool_call>', "hermes"),
        ("<tool_call>" + "[" * 5000 + "</tool_call>", "hermes"),
        ('[TOOL_CALLS]f[ARGS]{"a": 1}[TOOL_CALLS]g[ARGS]{}', "mistral"),  # left to the end
        ('{"name": "f", "parameters": {"a": 1}}; {"parameters": {}, "name": "g"}', "llama3"),
        ('<|python_tag|>{"name": "f", "parameters": "{\\"a\\": 1}"}', "llama3"),
        ('[TOOL_CALLS][{"name": "f", "arguments": {"a": [1, {"b": "]}"}]}}]', "mistral"),
    ],
)
@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_the_stream_adds_up_to_the_parse(text: str, fmt: str, step: int) -> None:
    content, calls = streamed(text, fmt, step)
    parsed = parse(text, fmt)  # type: ignore[arg-type]
    assert (content.strip() or None) == (parsed.content.strip() if parsed.content else None)
    assert [(n, json.loads(a)) for _i, n, a in calls.values()] == [
        (c.name, json.loads(c.arguments)) for c in parsed.calls
    ]


def test_hermes_arguments_leave_before_the_call_closes() -> None:
    streamer = ToolStreamer("hermes")
    events = streamer.feed('<tool_call>\n{"name": "f", "arguments": {"city": "Par')
    assert next(e.function.name for e in events if not isinstance(e, str)) == "f"
    assert "".join(e.function.arguments for e in events if not isinstance(e, str)) == (
        '{"city": "Par'
    )
    more = streamer.feed('is"}}\n</tool')
    assert "".join(e.function.arguments for e in more if not isinstance(e, str)) == 'is"}'


def test_text_that_might_open_a_call_is_held_back_only_that_long() -> None:
    streamer = ToolStreamer("hermes")
    assert streamer.feed("Hello <tool") == ["Hello"]
    assert streamer.feed("box> done") == [" <toolbox> done"]


@pytest.mark.parametrize(
    ("text", "fmt"), [(HERMES, "hermes"), (LLAMA, "llama3"), (MISTRAL, "mistral")]
)
def test_parallel_tool_calls_false_keeps_the_first_call(text: str, fmt: str) -> None:
    parsed = parse(text, fmt, max_calls=1)  # type: ignore[arg-type]
    assert [c.name for c in parsed.calls] == [parse(text, fmt).calls[0].name]  # type: ignore[arg-type]
    for step in (1, 4):
        streamer = ToolStreamer(fmt, max_calls=1)  # type: ignore[arg-type]
        events = [e for i in range(0, len(text), step) for e in streamer.feed(text[i : i + step])]
        events += streamer.finish()
        indexes = {e.index for e in events if not isinstance(e, str)}
        assert indexes == {0}


@pytest.mark.parametrize(
    ("fmt", "start", "rest"),
    [
        ("llama3", '{"name": "f", "parameters": {"city": "Par', 'is"}}; {"name": "g", '),
        ("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"city": "Par', 'is"}}, {"name": '),
    ],
)
def test_llama3_and_mistral_arguments_leave_as_written(fmt: str, start: str, rest: str) -> None:
    streamer = ToolStreamer(fmt)  # type: ignore[arg-type]
    events = streamer.feed(start)
    assert next(e.function.name for e in events if not isinstance(e, str)) == "f"
    assert "".join(e.function.arguments for e in events if not isinstance(e, str)) == (
        '{"city": "Par'
    )
    more = streamer.feed(rest)
    assert [e.function.arguments for e in more if not isinstance(e, str)] == ['is"}']
