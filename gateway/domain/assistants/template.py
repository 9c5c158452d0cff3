"""The response template's check: a small structural check of a JSON Schema, no library.

A template describes the one JSON object an assistant answers with (a report form): a
schema of type "object" with "properties". Only the shape is checked, with the keywords a
form uses; nothing is fetched ("$ref" is refused: it would point elsewhere) and nothing is
evaluated. Each refusal is a ValueError that says where in the template it is.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.domain.assistants.schemas import MAX_TEMPLATE_BYTES

TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
# Nesting deeper than a form needs is refused (and keeps the walk's recursion bounded).
MAX_DEPTH = 16
_TEXT_KEYS = ("title", "description", "format", "pattern")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def check_template(template: dict[str, Any]) -> None:
    """Refuse (ValueError) a template that is not an object schema with properties."""
    size = len(msgspec.json.encode(template))
    if size > MAX_TEMPLATE_BYTES:
        raise ValueError(
            f"response_template is {size} bytes encoded; at most {MAX_TEMPLATE_BYTES} are allowed"
        )
    if template.get("type") != "object":
        raise ValueError('response_template must be a JSON Schema with "type": "object"')
    properties = template.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise ValueError('response_template must have "properties": an object naming the fields')
    _check_no_nul(template, "response_template", 0)
    _check_schema(template, "response_template", 0)


def _check_schema(schema: Any, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: nested more than {MAX_DEPTH} levels")
    if isinstance(schema, bool):  # true / false are schemas too
        return
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a JSON Schema (an object)")
    if "$ref" in schema:
        raise ValueError(f"{where}: $ref is not supported; write the schema out")
    _check_type(schema.get("type"), where)
    for key in _TEXT_KEYS:
        if key in schema and not isinstance(schema[key], str):
            raise ValueError(f"{where}.{key} must be a string")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise ValueError(f"{where}.enum must be a non-empty list")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ValueError(f"{where}.properties must be an object")
    for name, sub in properties.items():
        if not name:
            raise ValueError(f"{where}.properties: a field name must not be empty")
        _check_schema(sub, f"{where}.properties.{name}", depth + 1)
    _check_required(schema.get("required"), properties, where)
    for key in ("items", "additionalProperties", "not"):
        if key in schema:
            _check_schema(schema[key], f"{where}.{key}", depth + 1)
    for key in _SCHEMA_LISTS:
        if key in schema:
            subs = schema[key]
            if not isinstance(subs, list) or not subs:
                raise ValueError(f"{where}.{key} must be a non-empty list of schemas")
            for i, sub in enumerate(subs):
                _check_schema(sub, f"{where}.{key}[{i}]", depth + 1)


def _check_type(kind: Any, where: str) -> None:
    if kind is None:
        return
    kinds = kind if isinstance(kind, list) else [kind]
    if not kinds or any(not isinstance(k, str) or k not in TYPES for k in kinds):
        raise ValueError(f"{where}.type must be one of {', '.join(sorted(TYPES))} (or a list)")


def _check_required(required: Any, properties: dict[str, Any], where: str) -> None:
    if required is None:
        return
    if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
        raise ValueError(f"{where}.required must be a list of field names")
    missing = [r for r in required if r not in properties]
    if missing:
        raise ValueError(f"{where}.required names fields it does not describe: {missing}")


def _check_no_nul(value: Any, where: str, depth: int) -> None:
    """The database refuses NUL in text (Postgres); JSON keys and strings alike."""
    if depth > MAX_DEPTH * 4:
        raise ValueError(f"{where}: nested too deeply")
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{where} must not contain a NUL character")
    elif isinstance(value, dict):
        for key, sub in value.items():
            _check_no_nul(key, where, depth + 1)
            _check_no_nul(sub, where, depth + 1)
    elif isinstance(value, list):
        for sub in value:
            _check_no_nul(sub, where, depth + 1)
