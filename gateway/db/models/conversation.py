from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin, IdMixin, utc_now

# SQLite makes only a column declared exactly INTEGER PRIMARY KEY the table's rowid; the
# FTS5 index of message text (SQLite only, see the 0004 migration) points at that rowid,
# and an implicit rowid may change on VACUUM.
MessageId = BigInteger().with_variant(Integer(), "sqlite")
# Search indexes that migration 0004 makes outside the models, since they differ by database
# (GIN expression indexes on Postgres, FTS5 tables on SQLite); migrations/env.py hides them
# from autogenerate, which would otherwise propose dropping them.
SEARCH_INDEXES = ("ix_conversation_messages_search", "ix_conversations_title_search")
SEARCH_TABLE_PREFIXES = ("conversation_messages_fts", "conversation_titles_fts")


class Conversation(IdMixin, CreatedMixin, Base):
    """One chat of one user; only that user ever reads or changes it."""

    __tablename__ = "conversations"
    # The list: one user's conversations, newest-updated first, keyset-paged on (updated_at, id).
    __table_args__ = (Index("ix_conversations_user_updated", "user_id", "updated_at", "id"),)

    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200), default="")
    model: Mapped[str] = mapped_column(String(200))
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(default=utc_now)
    # The department assistant the chat was started with, and its version then. No foreign
    # key: an assistant is archived, never deleted, and the chat keeps naming it.
    assistant_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    assistant_version: Mapped[int | None] = mapped_column(Integer, default=None)


class ConversationMessage(CreatedMixin, Base):
    """A message at ``position`` 0, 1, 2, ... of its conversation; an assistant's may carry
    the usage its generation reported."""

    __tablename__ = "conversation_messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "position"),
        CheckConstraint("role IN ('user', 'assistant')", name="role"),
    )

    id: Mapped[int] = mapped_column(MessageId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    position: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(20))
    content: Mapped[str] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200), default=None)
    prompt_tokens: Mapped[int | None] = mapped_column(default=None)
    completion_tokens: Mapped[int | None] = mapped_column(default=None)
    # The assistant version that answered (an assistant message of an assistant's chat).
    assistant_version: Mapped[int | None] = mapped_column(Integer, default=None)
