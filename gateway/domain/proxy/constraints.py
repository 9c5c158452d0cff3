"""Which structured-output constraint, and which tool choice, a request asks for, for the
metrics.

The gateway forwards ``response_format``, vLLM's ``guided_*`` fields, ``tools``,
``tool_choice`` and ``parallel_tool_calls`` unchanged (the worker validates and compiles
them); it only names their kind, with the worker's names.
"""

from __future__ import annotations

from typing import Any

_GUIDED = {
    "guided_json": "json_schema",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}
_FORMATS = {"json_schema": "json_schema", "json_object": "json_object"}


def constraint_kind(body: dict[str, Any]) -> str | None:
    """json_schema, json_object, regex, choice or grammar; "several" when more than one is
    set (the worker refuses that); None for free text or a field of the wrong shape."""
    kinds: list[str] = []
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        kind = _FORMATS.get(response_format.get("type"))  # type: ignore[arg-type]
        if kind is not None:
            kinds.append(kind)
    kinds.extend(kind for field, kind in _GUIDED.items() if body.get(field) is not None)
    if not kinds:
        return None
    return kinds[0] if len(kinds) == 1 else "several"


def tool_choice_kind(body: dict[str, Any]) -> str | None:
    """auto, none, required or named for a request that offers tools (a list); None
    without tools. A tool_choice of the wrong shape is "invalid" (the worker refuses it)."""
    if not isinstance(body.get("tools"), list):
        return None
    choice = body.get("tool_choice")
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return str(choice)
    return "named" if isinstance(choice, dict) else "invalid"
