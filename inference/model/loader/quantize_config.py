"""GPTQ and AWQ formats declared in a file of their own, beside config.json.

Older AutoGPTQ (and GPTQModel) save ``quantize_config.json`` (bits, group_size, desc_act,
sym, true_sequential, model_file_base_name, perhaps quant_method and checkpoint_format,
or an older ``is_marlin_format``); older AutoAWQ saves ``quant_config.json`` (w_bit,
q_group_size, zero_point, version "GEMM"/"GEMV"). Newer tools write the same facts into
config.json's ``quantization_config``, which is what the rest of the loader reads
(packed_format.py). `merge_legacy_files` turns the legacy files into that dict, so every
reader of the config sees one declaration:

- with no ``quantization_config``, the legacy file's fields become it (names as
  config.json spells them: bits, group_size, checkpoint_format, quant_method);
- with one, it stays what is read, and a legacy file that says otherwise about the layout
  (a field both give) is a ValueError naming both values.

A legacy file without ``quant_method`` is taken to be the method whose own fields it
holds (AutoGPTQ also reads ``quant_config.json``), else its writer's: GPTQ for
``quantize_config.json``, AWQ for ``quant_config.json``. Fields of the wrong type are a
ValueError naming the file; which values load is packed_format.py's decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inference.model.quant.packed_format import read_packed_format

# Legacy file -> the method its writer saves it for.
LEGACY_FILES = {"quantize_config.json": "gptq", "quant_config.json": "awq"}
# The tools' older names -> the names config.json's quantization_config uses.
SYNONYMS = {"w_bit": "bits", "q_group_size": "group_size", "format": "checkpoint_format"}
GPTQ_ONLY = frozenset({"desc_act", "sym", "checkpoint_format", "is_marlin_format",
                       "true_sequential", "damp_percent", "static_groups"})  # fmt: skip
AWQ_ONLY = frozenset({"zero_point", "version"})
# Fields that say how the weights are laid out: two declarations must not differ on these.
LAYOUT_FIELDS = ("quant_method", "bits", "group_size", "desc_act", "sym",
                 "checkpoint_format", "version", "zero_point")  # fmt: skip
BOOL_FIELDS = ("desc_act", "sym", "true_sequential", "static_groups", "zero_point",
               "is_marlin_format", "lm_head")  # fmt: skip
STR_FIELDS = ("quant_method", "checkpoint_format", "version")


def merge_legacy_files(config: dict[str, Any], legacy: Mapping[str, object]) -> dict[str, Any]:
    """config.json's document with the legacy files' declaration (file name -> parsed
    JSON) as its ``quantization_config``; ValueError for a file that cannot be one, or
    two declarations that disagree."""
    declared = config.get("quantization_config")
    if declared is not None and not isinstance(declared, dict):
        raise ValueError("config.json quantization_config must be an object")
    found = [(name, normalize_legacy(name, document)) for name, document in legacy.items()]
    if not found:
        return config
    reference = ("config.json's quantization_config", _renamed(declared)) if declared else None
    reference = reference or found[0]
    for name, fields in found:
        _check_agreement(reference, (name, fields))
    if declared:
        base = _base_name(found)
        merged = declared if base is None else {"model_file_base_name": base, **declared}
        return {**config, "quantization_config": merged}
    return {**config, "quantization_config": found[0][1]}


def normalize_legacy(name: str, document: object) -> dict[str, Any]:
    """One legacy file as a quantization_config: fields renamed, types checked, the
    method named, and its layout checked by packed_format.py (errors name the file)."""
    if not isinstance(document, dict):
        raise ValueError(f"{name} must hold a JSON object")
    fields = _renamed(document)
    if "bits" not in fields:
        raise ValueError(f"{name} gives no bits (w_bit)")
    if not _is_int(fields["bits"]):
        raise ValueError(f"{name}: bits must be an integer (4 or 8), got {fields['bits']!r}")
    group_size = fields.get("group_size", -1)
    if not _is_int(group_size) or not (group_size == -1 or group_size > 0):
        raise ValueError(
            f"{name}: group_size must be a positive integer or -1 (one group a row), "
            f"got {group_size!r}"
        )
    for field in BOOL_FIELDS:
        if field in fields and not isinstance(fields[field], bool):
            raise ValueError(f"{name}: {field} must be true or false, got {fields[field]!r}")
    for field in STR_FIELDS:
        if field in fields and not isinstance(fields[field], str):
            raise ValueError(f"{name}: {field} must be a string, got {fields[field]!r}")
    base = fields.get("model_file_base_name")
    if base is not None:
        check_base_name(base, name)
    if fields.pop("is_marlin_format", False):
        fields.setdefault("checkpoint_format", "marlin")
    fields["quant_method"] = _method(name, fields)
    try:
        read_packed_format(fields)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    return fields


def check_base_name(base: object, source: str) -> str:
    """A weights file's base name: a plain file name inside the checkpoint directory."""
    if not isinstance(base, str) or base in ("", ".", "..") or any(c in base for c in "/\\"):
        raise ValueError(f"{source}: model_file_base_name {base!r} must be a plain file name")
    return base


def _base_name(found: list[tuple[str, dict[str, Any]]]) -> str | None:
    """The weights' base name a legacy file gives (config.json's own has no such field)."""
    for _name, fields in found:
        if fields.get("model_file_base_name") is not None:
            return str(fields["model_file_base_name"])
    return None


def _renamed(document: Mapping[str, Any]) -> dict[str, Any]:
    fields = {key: value for key, value in document.items() if key not in SYNONYMS}
    for old, new in SYNONYMS.items():
        if old in document:
            fields.setdefault(new, document[old])
    return fields


def _method(name: str, fields: dict[str, Any]) -> str:
    method = fields.get("quant_method")
    if method is not None:
        if method.lower() not in ("gptq", "awq"):
            raise ValueError(f"{name}: quant_method {method!r} is not GPTQ or AWQ")
        return str(method.lower())
    gptq, awq = bool(GPTQ_ONLY & fields.keys()), bool(AWQ_ONLY & fields.keys())
    if gptq != awq:
        return "gptq" if gptq else "awq"
    return LEGACY_FILES[name]


def _check_agreement(
    reference: tuple[str, dict[str, Any]], other: tuple[str, dict[str, Any]]
) -> None:
    (ref_name, ref), (name, fields) = reference, other
    for field in LAYOUT_FIELDS:
        if field not in ref or field not in fields:
            continue
        if _comparable(ref[field]) != _comparable(fields[field]):
            raise ValueError(
                f"{name} says {field} {fields[field]!r} but {ref_name} says "
                f"{ref[field]!r}; the two declarations of the quantization disagree "
                "(remove the one that does not describe the weights)"
            )


def _comparable(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
