"""JSON schemas the structured-output tests generate under: bounded (maxLength, maxItems,
integer ranges, no additional properties) so a random-weight model always finishes."""

from __future__ import annotations

from typing import Any

SHORT = {"type": "string", "maxLength": 8}

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "part": SHORT,
        "defect": {
            "type": "object",
            "properties": {
                "kind": {"enum": ["scratch", "dent", "crack"]},
                "depth_um": {"type": "integer", "minimum": 0, "maximum": 500},
            },
            "required": ["kind"],
            "additionalProperties": False,
        },
        "ok": {"type": "boolean"},
    },
    "required": ["part", "defect", "ok"],
    "additionalProperties": False,
}

ARRAYS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "readings": {
            "type": "array",
            "items": {"type": "integer", "minimum": -9, "maximum": 99},
            "minItems": 1,
            "maxItems": 4,
        },
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
    },
    "required": ["readings"],
    "additionalProperties": False,
}

# Optional fields: only "id" is required.
OPTIONAL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 9999},
        "note": SHORT,
        "severity": {"enum": ["low", "medium", "high"]},
    },
    "required": ["id"],
    "additionalProperties": False,
}

REFS: dict[str, Any] = {
    "$defs": {
        "person": {
            "type": "object",
            "properties": {"name": SHORT, "role": {"enum": ["operator", "engineer"]}},
            "required": ["name", "role"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "inspector": {"$ref": "#/$defs/person"},
        "reviewer": {"$ref": "#/$defs/person"},
    },
    "required": ["inspector", "reviewer"],
    "additionalProperties": False,
}

ALL = {"nested": NESTED, "arrays": ARRAYS, "optional": OPTIONAL, "refs": REFS}
