"""Structured outputs on the API: from a request's response_format / guided_* fields to the
engine's Constraint, compiled (and cached) before the request is queued.

At most one constraint per request. Everything that makes one unusable (a schema that is
not an object, an unsupported keyword, an invalid regex, a bad grammar, a compilation that
runs past its time limit) is a 400 naming the field and saying why.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

import msgspec

from inference.grammar.spec import Constraint, GrammarError
from inference.server.errors import bad_param
from inference.server.protocol import JsonObjectFormat, JsonSchemaResponseFormat, SamplingFields
from inference.server.validation import check_depth

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine
    from inference.sampling.params import SamplingParams

MAX_SCHEMA_DEPTH = 64
MAX_CHOICES = 1024
_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for json_schema.name


def constraint_of(request: SamplingFields) -> tuple[str, Constraint] | None:
    """(the field that set it, the constraint), or None for free text."""
    found: list[tuple[str, Constraint]] = []
    response_format = request.response_format
    if isinstance(response_format, JsonObjectFormat):
        found.append(("response_format", Constraint("json_object")))
    elif isinstance(response_format, JsonSchemaResponseFormat):
        spec = response_format.json_schema
        if not _SCHEMA_NAME.match(spec.name):
            raise bad_param(
                "response_format.json_schema.name",
                "response_format.json_schema.name must be 1 to 64 letters, digits, "
                f"underscores or dashes, got {spec.name[:80]!r}",
            )
        param = "response_format.json_schema.schema"
        if spec.schema is None:
            raise bad_param(param, f"{param} is required")
        text = _schema_text(spec.schema, param)
        found.append(("response_format", Constraint("json_schema", text)))
    if request.guided_json is not None:
        schema = request.guided_json
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise bad_param("guided_json", f"guided_json is not valid JSON: {exc}") from None
        text = _schema_text(schema, "guided_json")
        found.append(("guided_json", Constraint("json_schema", text)))
    if request.guided_regex is not None:
        if not request.guided_regex:
            raise bad_param("guided_regex", "guided_regex must not be empty")
        found.append(("guided_regex", Constraint("regex", request.guided_regex)))
    if request.guided_choice is not None:
        choices = request.guided_choice
        if not choices or len(choices) > MAX_CHOICES or not all(choices):
            raise bad_param(
                "guided_choice",
                f"guided_choice must hold 1 to {MAX_CHOICES} non-empty strings",
            )
        found.append(("guided_choice", Constraint("choice", json.dumps(choices))))
    if request.guided_grammar is not None:
        if not request.guided_grammar.strip():
            raise bad_param("guided_grammar", "guided_grammar must not be empty")
        found.append(("guided_grammar", Constraint("grammar", request.guided_grammar)))
    if len(found) > 1:
        names = ", ".join(name for name, _c in found)
        raise bad_param(
            found[1][0], f"only one structured-output constraint may be set, got {names}"
        )
    return found[0] if found else None


def _schema_text(schema: Any, param: str) -> str:
    if not isinstance(schema, dict | bool):
        raise bad_param(param, f"{param} must be a JSON schema object")
    check_depth(schema, param, MAX_SCHEMA_DEPTH)
    # msgspec keeps the keys' order: properties are generated in the order given.
    return msgspec.json.encode(schema).decode()


async def constrain(engine: LLMEngine, request: SamplingFields, params: SamplingParams) -> str:
    """Compile the request's constraint (off the event loop, within the compiler's time
    limit) and put it in ``params``; the constraint's kind for the metrics, or ""."""
    found = constraint_of(request)
    if found is None:
        return ""
    param, constraint = found
    try:
        await asyncio.to_thread(engine.grammars.compile, constraint)
    except GrammarError as exc:
        raise bad_param(param, f"{param} cannot be used: {exc}") from None
    params.constraint = constraint
    return constraint.kind
