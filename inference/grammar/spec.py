"""What a request constrains its output to, before anything is compiled.

``Constraint`` is a plain value (kind and source text): it rides in SamplingParams, keys the
compiled-grammar cache, and imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["json_schema", "json_object", "regex", "choice", "grammar"]
KINDS: tuple[Kind, ...] = ("json_schema", "json_object", "regex", "choice", "grammar")

# json_object: any JSON object, as OpenAI's JSON mode promises.
ANY_OBJECT_SCHEMA = '{"type": "object"}'


class GrammarError(ValueError):
    """The constraint cannot be used: invalid, unsupported, too complex or too slow to
    compile. The message says why; the server answers it as a 400."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """``source``: the JSON schema as JSON text (json_schema), the regex, the choices as a
    JSON array of strings (choice), or the Lark grammar (grammar); "" for json_object."""

    kind: Kind
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise GrammarError(f"unknown constraint kind {self.kind!r}; known: {KINDS}")
