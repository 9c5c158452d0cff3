"""Tool calls in a model's output: which format the model writes, and the parsers from its
text to OpenAI's ``tool_calls``.

The format is read from the chat template's text, since the template is what taught the
prompt its tool syntax (see :func:`format_of`):

- ``hermes`` (Hermes, Qwen2.5/Qwen3, SmolLM2): ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>``, once per call, anywhere in the text;
- ``llama3`` (Llama 3.1-3.3): the whole reply is ``{"name": ..., "parameters": {...}}``
  (after an optional ``<|python_tag|>``), several separated by ``;``;
- ``mistral``: ``[TOOL_CALLS]`` then a JSON array of ``{"name", "arguments"}`` objects, or
  (tokenizer v11+) ``[TOOL_CALLS]name[ARGS]{...}`` per call.

Parsing is all or nothing: output that does not parse as the format's calls is returned as
content, never an error, since a model may well write something that merely looks like one.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

ToolFormat = Literal["hermes", "llama3", "mistral"]
FORMATS: tuple[ToolFormat, ...] = ("hermes", "llama3", "mistral")

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
LLAMA_TAG = "<|python_tag|>"
MISTRAL_MARK, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_DECODER = json.JSONDecoder()


def format_of(template: str | None) -> ToolFormat:
    """The tool-call format a chat template teaches, by the markers its text contains:
    ``[TOOL_CALLS]`` is Mistral's, ``<tool_call>`` Hermes/Qwen's, ``<|python_tag|>`` or
    the ``"parameters"`` key beside Llama 3's ``<|eot_id|>`` is Llama 3's. A template with
    none of them (no tool support, or one we do not know) gets Hermes, the most common."""
    text = template or ""
    if MISTRAL_MARK in text:
        return "mistral"
    if HERMES_OPEN in text:
        return "hermes"
    if LLAMA_TAG in text or ("<|eot_id|>" in text and "parameters" in text):
        return "llama3"
    return "hermes"


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text of an object


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    content: str | None  # the text outside the calls; None when there is none
    calls: list[ParsedCall]


def parse(text: str, fmt: ToolFormat, max_calls: int | None = None) -> ParsedOutput:
    """``text`` split into calls and content; no calls (and ``text`` as the content) when it
    does not parse as ``fmt``'s calls. Calls past ``max_calls`` are dropped
    (``parallel_tool_calls`` false: one call at most)."""
    found: tuple[str, list[ParsedCall]] | None
    if fmt == "hermes":
        found = _parse_hermes(text)
    elif fmt == "llama3":
        found = _parse_llama3(text)
    else:
        found = _parse_mistral(text)
    if found is None or not found[1]:
        return ParsedOutput(text, [])
    content, calls = found
    return ParsedOutput(content if content.strip() else None, calls[:max_calls])


def call_of(value: Any, arguments_key: str = "arguments") -> ParsedCall | None:
    """A call from one decoded JSON object (``{"name", <arguments_key>}``), or None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get(arguments_key, value.get("arguments", {}))
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # deep nesting: RecursionError
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def _parse_hermes(text: str) -> tuple[str, list[ParsedCall]] | None:
    calls = []
    for block in _HERMES_BLOCK.finditer(text):
        try:
            value = json.loads(block.group(1))
        except (ValueError, RecursionError):  # deep nesting: RecursionError
            return None
        call = call_of(value)
        if call is None:
            return None
        calls.append(call)
    return _HERMES_BLOCK.sub("", text).strip(), calls


def _parse_llama3(text: str) -> tuple[str, list[ParsedCall]] | None:
    body = text.strip()
    if body.startswith(LLAMA_TAG):
        body = body[len(LLAMA_TAG) :].lstrip()
    if not body.startswith("{"):
        return None
    calls = []
    at = 0
    while at < len(body):
        try:
            value, end = _DECODER.raw_decode(body, at)
        except (ValueError, RecursionError):  # deep nesting: RecursionError
            return None
        call = call_of(value, "parameters")
        if call is None:
            return None
        calls.append(call)
        at = _skip(body, end, ";")
    return "", calls


def _parse_mistral(text: str) -> tuple[str, list[ParsedCall]] | None:
    start = text.find(MISTRAL_MARK)
    if start < 0:
        return None
    content, rest = text[:start], text[start + len(MISTRAL_MARK) :].strip()
    calls: list[ParsedCall] = []
    if rest.startswith("["):
        try:
            values, end = _DECODER.raw_decode(rest)
        except (ValueError, RecursionError):  # deep nesting: RecursionError
            return None
        if not isinstance(values, list) or rest[end:].strip():
            return None
        for value in values:
            call = call_of(value)
            if call is None:
                return None
            calls.append(call)
        return content.strip(), calls
    # v11+: name[ARGS]{...}, each call after its own [TOOL_CALLS].
    for part in rest.split(MISTRAL_MARK):
        name, sep, arguments = part.strip().partition(MISTRAL_ARGS)
        if not sep:
            return None
        call = call_of({"name": name.strip(), "arguments": arguments.strip()})
        if call is None:
            return None
        calls.append(call)
    return content.strip(), calls


def _skip(text: str, at: int, separators: str) -> int:
    while at < len(text) and (text[at].isspace() or text[at] in separators):
        at += 1
    return at
