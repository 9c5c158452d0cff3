from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

import msgspec

from gateway.domain.fields import NO_NUL, Count32, Int32, ModelName, Name

# 256 Ki characters (up to 1 MiB of UTF-8): far past any model's context, small enough that
# a conversation of them stays a sane row set. Postgres refuses NUL in text.
MAX_TEXT_CHARS = 256 * 1024
# Messages one append may carry, and that one conversation may hold.
MAX_APPEND = 100
MAX_MESSAGES = 10_000

LongText = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS, pattern=NO_NUL)]
TokenCount = Count32
Role = Literal["user", "assistant"]


class ConversationCreate(msgspec.Struct, forbid_unknown_fields=True):
    """``model`` is required unless ``assistant_id`` names one of the caller's department's
    assistants (GET /api/assistants): then the model is the assistant's slug."""

    model: ModelName = ""
    title: Name = ""
    system_prompt: LongText = ""
    assistant_id: uuid.UUID | None = None


class ConversationUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """Only the fields present are changed."""

    title: Name | msgspec.UnsetType = msgspec.UNSET
    model: ModelName | msgspec.UnsetType = msgspec.UNSET
    system_prompt: LongText | msgspec.UnsetType = msgspec.UNSET


class Usage(msgspec.Struct, forbid_unknown_fields=True):
    """What the generation of an assistant message reported (OpenAI's ``usage``)."""

    prompt_tokens: TokenCount | None = None
    completion_tokens: TokenCount | None = None
    model: ModelName | None = None


class MessageCreate(msgspec.Struct, forbid_unknown_fields=True):
    role: Role
    content: LongText
    usage: Usage | None = None
    # The assistant version that answered (the x-enclave-assistant header's version):
    # assistant messages of a conversation started with an assistant only.
    assistant_version: Int32 | None = None


class MessagesAppend(msgspec.Struct, forbid_unknown_fields=True):
    messages: Annotated[list[MessageCreate], msgspec.Meta(min_length=1, max_length=MAX_APPEND)]


class Truncate(msgspec.Struct, forbid_unknown_fields=True):
    from_position: Count32


class MessageRead(msgspec.Struct):
    position: int
    role: str
    content: str
    created_at: datetime
    usage: Usage | None = None
    assistant_version: int | None = None


class AssistantRef(msgspec.Struct):
    """The department assistant a conversation was started with, and its version then (it
    stays named after the assistant is archived)."""

    id: uuid.UUID
    slug: str
    name: str
    version: int


class ConversationRead(msgspec.Struct):
    """One conversation in the list: no messages."""

    id: uuid.UUID
    title: str
    model: str
    system_prompt: str
    created_at: datetime
    updated_at: datetime
    assistant: AssistantRef | None


class ConversationDetail(ConversationRead):
    """One conversation with its messages, in order."""

    messages: list[MessageRead]


class SearchHit(msgspec.Struct):
    """A match in a message (``position`` set) or in a title (``position`` null); the
    snippet is plain text around the match, not markup."""

    conversation_id: uuid.UUID
    title: str
    position: int | None
    snippet: str


class SearchResults(msgspec.Struct):
    items: list[SearchHit]
