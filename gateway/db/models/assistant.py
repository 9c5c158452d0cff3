"""Department assistants: a named, versioned system prompt that a department's people and
keys chat with, kept warm in the workers' prefix caches (docs/assistants.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin, IdMixin, utc_now


class Assistant(IdMixin, CreatedMixin, Base):
    """What stays the same across edits: who owns it, what it is called, whether it is the
    department's default. What it says lives in its versions; ``current_version`` is the
    one requests use. Archived assistants keep their rows (conversations and audit records
    name them) and their slug, which is never handed out again."""

    __tablename__ = "assistants"

    department_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("departments.id", ondelete="CASCADE"), index=True
    )
    slug: Mapped[str] = mapped_column(String(100), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(200))
    is_default: Mapped[bool] = mapped_column(default=False, server_default=false())
    current_version: Mapped[int] = mapped_column(Integer, default=1)
    archived_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now, onupdate=utc_now)


class AssistantVersion(IdMixin, CreatedMixin, Base):
    """One immutable edit of an assistant: version 1, 2, 3, ... Never changed or deleted."""

    __tablename__ = "assistant_versions"
    __table_args__ = (UniqueConstraint("assistant_id", "version"),)

    assistant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("assistants.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    system_prompt: Mapped[str] = mapped_column(Text)
    # None: the appliance's default model (the first a worker lists).
    model: Mapped[str | None] = mapped_column(String(200), default=None)
    # Defaults for fields a request leaves out: temperature, top_p, max_tokens.
    sampling: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # A JSON schema of the answer's fields (a report form), or None for free text.
    response_template: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # The system prompt's length in the model's tokens, when a worker could count it.
    prompt_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    created_by: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
