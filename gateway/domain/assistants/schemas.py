"""The assistants API's bodies (docs/assistants.md). The limits are in the types, so that
the OpenAPI document says what the service checks; the response template's structure is
checked by template.py."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from gateway.domain.fields import INT32_MAX, NO_NUL, ModelName, Name

# Unique across every department, forever, and never a served model's name.
SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
AssistantSlug = Annotated[str, msgspec.Meta(pattern=SLUG_PATTERN)]
MAX_PROMPT_CHARS = 256 * 1024
SystemPrompt = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_PROMPT_CHARS, pattern=NO_NUL)
]
# Text to count: empty is allowed (0 tokens of prompt, the template's wrapping only).
CountText = Annotated[str, msgspec.Meta(max_length=MAX_PROMPT_CHARS, pattern=NO_NUL)]
MAX_TEMPLATE_BYTES = 64 * 1024
Template = dict[str, Any]


class Sampling(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Defaults for what a request leaves out, in OpenAI's ranges; absent: the model's own."""

    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)] | None = None


class WarmStatus(msgspec.Struct):
    """Whether the assistant's current version is pinned in its worker's prefix cache
    (PrefixWarmer.status, gateway/domain/assistants/warming.py)."""

    state: Literal["warm", "pending", "failed"]
    version: int
    worker: str | None = None
    pinned_tokens: int | None = None
    num_tokens: int | None = None
    error: str | None = None


class AssistantCreate(msgspec.Struct, forbid_unknown_fields=True):
    department_id: uuid.UUID
    name: Name
    system_prompt: SystemPrompt
    # Absent: made from the name (with -2, -3, ... when taken).
    slug: AssistantSlug | None = None
    # Absent: the appliance's default model (the first a worker lists).
    model: ModelName | None = None
    sampling: Sampling | None = None
    # A JSON Schema of type "object" with "properties": the answer's fields.
    response_template: Template | None = None
    is_default: bool = False


class AssistantUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """Only the fields present change. A change to system_prompt, model, sampling or
    response_template makes a new version; name and is_default do not. Null clears model,
    sampling or response_template."""

    name: Name | msgspec.UnsetType = msgspec.UNSET
    system_prompt: SystemPrompt | msgspec.UnsetType = msgspec.UNSET
    model: ModelName | msgspec.UnsetType | None = msgspec.UNSET
    sampling: Sampling | msgspec.UnsetType | None = msgspec.UNSET
    response_template: Template | msgspec.UnsetType | None = msgspec.UNSET
    is_default: bool | msgspec.UnsetType = msgspec.UNSET


class AssistantRead(msgspec.Struct):
    id: uuid.UUID
    department_id: uuid.UUID
    department_name: str
    slug: str
    name: str
    is_default: bool
    version: int
    system_prompt: str
    model: str | None
    sampling: Sampling | None
    response_template: Template | None
    prompt_tokens: int | None
    archived: bool
    created_at: datetime
    updated_at: datetime
    warm: WarmStatus | None = None


class AssistantVersionRead(msgspec.Struct):
    version: int
    system_prompt: str
    model: str | None
    sampling: Sampling | None
    response_template: Template | None
    prompt_tokens: int | None
    created_at: datetime
    created_by: uuid.UUID | None


class VersionList(msgspec.Struct):
    """Newest first."""

    items: list[AssistantVersionRead]


class AssistantCard(msgspec.Struct):
    """What a department's people see of an assistant: no system prompt."""

    id: uuid.UUID
    slug: str
    name: str
    is_default: bool
    version: int
    model: str | None
    prompt_tokens: int | None
    response_template: Template | None
    sampling: Sampling | None


class CardList(msgspec.Struct):
    """The default first, then by name."""

    items: list[AssistantCard]


class TokenCountRequest(msgspec.Struct, forbid_unknown_fields=True):
    text: CountText
    model: ModelName | None = None


class TokenCount(msgspec.Struct):
    tokens: int
    model: str


class ExtractedText(msgspec.Struct):
    text: str
    filename: str
    characters: int
