"""Tool calling on the API: the request's ``tools`` and ``tool_choice`` checked, the tools
and tool history put in the shape Hugging Face chat templates read, and ``required`` or a
named function turned into a grammar that makes the model write exactly the call(s).

The grammar is Lark with each function's call inlined as a JSON schema (llguidance's
``%json``), in the model's own format (tool_calls.py), compiled and cached by the same
GrammarCompiler as response_format. A parameters schema llguidance cannot compile is a 400
naming the tool, whatever the tool_choice (except ``none``, which ignores the tools).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from inference.grammar.spec import Constraint, GrammarError
from inference.server.errors import bad_param
from inference.server.protocol import ChatCompletionRequest, ChatMessage, NamedToolChoice, Tool
from inference.server.structured import MAX_SCHEMA_DEPTH, constraint_of
from inference.server.tool_calls import HERMES_CLOSE, HERMES_OPEN, MISTRAL_MARK, ToolFormat
from inference.server.validation import check_depth

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine
    from inference.sampling.params import SamplingParams

MAX_TOOLS = 128  # OpenAI's limit
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
# Calls are written compactly, as response_format's JSON is (compiler.JSON_OPTIONS).
_COMPACT = {"whitespace_flexible": False}


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """What a request's tools mean for its rendering, generation and parsing."""

    tools: list[dict[str, Any]]  # for the chat template, as transformers passes them
    schemas: dict[str, dict[str, Any]]  # function name -> parameters schema
    choice: str  # auto, required, or the named function's name
    parallel: bool

    @property
    def forced(self) -> bool:
        return self.choice != "auto"


def check_tools(request: ChatCompletionRequest) -> ToolPlan | None:
    """The request's tool plan; None when no tools are offered (no tools, or tool_choice
    none); a 400 naming the field for anything unusable."""
    choice = request.tool_choice
    if request.tools is None:
        if choice not in (None, "none", "auto"):
            raise bad_param("tool_choice", "tool_choice requires tools")
        return None
    if not 1 <= len(request.tools) <= MAX_TOOLS:
        raise bad_param("tools", f"tools must hold 1 to {MAX_TOOLS} functions")
    if choice == "none":
        return None
    schemas: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(request.tools):
        name = tool.function.name
        if name in schemas:
            raise bad_param(f"tools[{i}].function.name", f"two tools are named {name!r}")
        schemas[name] = _parameters(tool, f"tools[{i}].function.parameters")
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in schemas:
            raise bad_param(
                "tool_choice",
                f"tool_choice names the function {choice.function.name[:80]!r}, "
                f"which is not among the tools ({', '.join(schemas)})",
            )
        picked = choice.function.name
    else:
        picked = choice or "auto"
    if picked != "auto" and constraint_of(request) is not None:
        raise bad_param(
            "tool_choice",
            "tool_choice required or a named function cannot be combined with "
            "response_format or guided_*",
        )
    return ToolPlan(
        tools=[_template_tool(tool) for tool in request.tools],
        schemas=schemas,
        choice=picked,
        parallel=request.parallel_tool_calls,
    )


def _parameters(tool: Tool, param: str) -> dict[str, Any]:
    schema = tool.function.parameters
    if schema is None:
        return EMPTY_PARAMETERS
    if schema.get("type", "object") != "object":
        raise bad_param(param, f"{param} must be a JSON schema of type object")
    check_depth(schema, param, MAX_SCHEMA_DEPTH)
    return schema


def template_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    """``tools`` as the chat template gets them, for /tokenize (which compiles nothing)."""
    for i, tool in enumerate(tools):
        if tool.function.parameters is not None:
            param = f"tools[{i}].function.parameters"
            check_depth(tool.function.parameters, param, MAX_SCHEMA_DEPTH)
    return [_template_tool(tool) for tool in tools]


def _template_tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.function.name}
    if tool.function.description is not None:
        function["description"] = tool.function.description
    function["parameters"] = tool.function.parameters or EMPTY_PARAMETERS
    return {"type": "function", "function": function}


def template_message(message: ChatMessage, i: int, entry: dict[str, Any]) -> None:
    """Add ``message``'s tool fields to its template ``entry``: tool_calls with their
    arguments as a dict (what Llama 3's, Qwen's and Hermes' templates ``tojson``; vLLM
    converts them the same way) and a tool message's tool_call_id."""
    if message.tool_call_id is not None:
        entry["tool_call_id"] = message.tool_call_id
    if not message.tool_calls:
        return
    calls = []
    for j, call in enumerate(message.tool_calls):
        param = f"messages[{i}].tool_calls[{j}].function.arguments"
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except (ValueError, RecursionError):  # deep nesting: RecursionError
            raise bad_param(param, f"{param} must be JSON text") from None
        if not isinstance(arguments, dict):
            raise bad_param(param, f"{param} must be a JSON object")
        check_depth(arguments, param)
        function = {"name": call.function.name, "arguments": arguments}
        calls.append({"id": call.id, "type": "function", "function": function})
    entry["tool_calls"] = calls


def marker_terms(tokenizer: Any, ll_tokenizer: Any, fmt: ToolFormat) -> dict[str, str]:
    """The Lark term for each of ``fmt``'s markers. A marker the tokenizer has as one added
    token (Qwen's ``<tool_call>``, Mistral's ``[TOOL_CALLS]``) is one llguidance treats as
    special, whose text ordinary tokens cannot spell into: the grammar must name that
    token (``<[id]>``). Any other marker is its text."""
    if fmt == "llama3":
        return {}  # its calls have no markers
    markers = [MISTRAL_MARK] if fmt == "mistral" else [HERMES_OPEN, HERMES_CLOSE]
    terms = {}
    for marker in markers:
        ids = tokenizer.encode(marker, add_special_tokens=False)
        special = len(ids) == 1 and ll_tokenizer.is_special_token(ids[0])
        terms[marker] = f"<[{ids[0]}]>" if special else json.dumps(marker)
    return terms


def call_grammar(plan: ToolPlan, fmt: ToolFormat, terms: dict[str, str] | None = None) -> str:
    """Lark for exactly one call (several when parallel and ``required``) in ``fmt``, each
    call's arguments under its function's parameters schema; ``terms``: the markers' Lark
    terms (marker_terms), their text by default."""
    term = {marker: json.dumps(marker) for marker in (HERMES_OPEN, HERMES_CLOSE, MISTRAL_MARK)}
    term.update(terms or {})
    names = list(plan.schemas) if plan.choice == "required" else [plan.choice]
    several = plan.parallel and plan.choice == "required"
    arguments_key = "parameters" if fmt == "llama3" else "arguments"
    rules = [
        f"f{k}: %json {_call_schema(name, plan.schemas[name], arguments_key)}"
        for k, name in enumerate(names)
    ]
    rules.insert(0, "body: " + " | ".join(f"f{k}" for k in range(len(names))))
    if fmt == "hermes":
        call = f'call: {term[HERMES_OPEN]} "\\n" body "\\n" {term[HERMES_CLOSE]}'
        start = 'start: call ("\\n" call)*' if several else "start: call"
    elif fmt == "llama3":
        call = "call: body"
        start = 'start: call ("; " call)*' if several else "start: call"
    else:
        mark = term[MISTRAL_MARK]
        call = f'call: {mark} "[" body ("," body)* "]"'
        if not several:
            call = f'call: {mark} "[" body "]"'
        start = "start: call"
    return "\n".join([start, call, *rules])


def _call_schema(name: str, parameters: dict[str, Any], arguments_key: str) -> str:
    arguments = dict(parameters)
    wrapper: dict[str, Any] = {"x-guidance": _COMPACT}
    # $refs point at the parameters' root ("#/$defs/x"): their definitions move to the root.
    for key in ("$defs", "definitions"):
        if key in arguments:
            wrapper[key] = arguments.pop(key)
    wrapper.update(
        {
            "type": "object",
            "properties": {"name": {"const": name}, arguments_key: arguments},
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
    )
    return msgspec.json.encode(wrapper).decode()


async def constrain_tools(
    engine: LLMEngine, plan: ToolPlan, fmt: ToolFormat, params: SamplingParams
) -> None:
    """Compile each function's parameters (a 400 naming the tool if llguidance cannot use
    one) and, under ``required`` or a named function, put the call grammar in ``params``."""
    for i, (name, schema) in enumerate(plan.schemas.items()):
        param = f"tools[{i}].function.parameters"
        constraint = Constraint("json_schema", msgspec.json.encode(schema).decode())
        try:
            await asyncio.to_thread(engine.grammars.compile, constraint)
        except GrammarError as exc:
            raise bad_param(param, f"{param} of {name!r} cannot be used: {exc}") from None
    if not plan.forced:
        return
    try:
        params.constraint = await asyncio.to_thread(_compile_calls, engine, plan, fmt)
    except GrammarError as exc:
        raise bad_param("tool_choice", f"the tool-call grammar cannot be used: {exc}") from None


def _compile_calls(engine: LLMEngine, plan: ToolPlan, fmt: ToolFormat) -> Constraint:
    terms = marker_terms(engine.tokenizer, engine.grammars.tokenizer, fmt)
    constraint = Constraint("grammar", call_grammar(plan, fmt, terms))
    engine.grammars.compile(constraint)
    return constraint
