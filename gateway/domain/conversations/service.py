"""A user's conversations. Every query names the owner: another user's conversation is
"not found", exactly like one that does not exist, whoever asks (admins included)."""

from __future__ import annotations

import uuid

import msgspec
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import as_utc, utc_now
from gateway.db.models import Assistant, Conversation, ConversationMessage
from gateway.domain.assistants.service import AssistantService
from gateway.domain.conversations import pages
from gateway.domain.conversations.schemas import (
    MAX_MESSAGES,
    AssistantRef,
    ConversationCreate,
    ConversationDetail,
    ConversationRead,
    ConversationUpdate,
    MessageCreate,
    MessageRead,
    Usage,
)
from gateway.domain.pagination import Page
from gateway.errors import NotFoundError


def to_read(row: Conversation, assistant: Assistant | None = None) -> ConversationRead:
    """``assistant``: the row of the assistant the conversation was started with, if any."""
    ref = None
    if assistant is not None and row.assistant_version is not None:
        ref = AssistantRef(assistant.id, assistant.slug, assistant.name, row.assistant_version)
    return ConversationRead(
        row.id,
        row.title,
        row.model,
        row.system_prompt,
        as_utc(row.created_at),
        as_utc(row.updated_at),
        ref,
    )


def message_read(row: ConversationMessage) -> MessageRead:
    reported = (row.prompt_tokens, row.completion_tokens, row.model)
    usage = Usage(*reported) if any(v is not None for v in reported) else None
    return MessageRead(
        row.position,
        row.role,
        row.content,
        as_utc(row.created_at),
        usage,
        row.assistant_version,
    )


def message_row(
    conversation: Conversation, position: int, data: MessageCreate
) -> ConversationMessage:
    usage = data.usage or Usage()
    if data.usage is not None and data.role != "assistant":
        raise ValueError("usage belongs to assistant messages only")
    if data.assistant_version is not None:
        if data.role != "assistant":
            raise ValueError("assistant_version belongs to assistant messages only")
        if conversation.assistant_id is None:
            raise ValueError(
                "assistant_version: this conversation was not started with an assistant"
            )
    return ConversationMessage(
        conversation_id=conversation.id,
        position=position,
        role=data.role,
        content=data.content,
        model=usage.model,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        assistant_version=data.assistant_version,
    )


class ConversationService:
    def __init__(
        self, db: AsyncSession, user_id: uuid.UUID, department_id: uuid.UUID | None = None
    ) -> None:
        self.db = db
        self.user_id = user_id
        self.department_id = department_id  # whose assistants a new conversation may use

    async def get(self, conversation_id: uuid.UUID) -> Conversation:
        row = await self.db.scalar(
            select(Conversation).where(
                Conversation.id == conversation_id, Conversation.user_id == self.user_id
            )
        )
        if row is None:
            raise NotFoundError("no such conversation")
        return row

    async def touch(self, conversation_id: uuid.UUID) -> Conversation:
        """Move updated_at as the transaction's first statement: the write takes the row's
        lock on Postgres and the database's write lock on SQLite, so racing appends queue
        here instead of numbering their messages from the same last position."""
        touched = await self.db.scalar(
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.user_id == self.user_id)
            .values(updated_at=utc_now())
            .returning(Conversation.id)
        )
        if touched is None:
            raise NotFoundError("no such conversation")
        return await self.get(conversation_id)

    async def summary(self, row: Conversation) -> ConversationRead:
        """``row`` as the API shows it, with the assistant it was started with."""
        assistants = await self._assistants([row])
        return to_read(row, assistants.get(row.assistant_id) if row.assistant_id else None)

    async def _assistants(self, rows: list[Conversation]) -> dict[uuid.UUID, Assistant]:
        """The assistants ``rows`` were started with (archived ones too), by id."""
        ids = {row.assistant_id for row in rows if row.assistant_id is not None}
        if not ids:
            return {}
        found = await self.db.scalars(select(Assistant).where(Assistant.id.in_(ids)))
        return {a.id: a for a in found}

    async def list_page(self, after: str | None, limit: int) -> Page[ConversationRead]:
        mine = select(Conversation).where(Conversation.user_id == self.user_id)
        rows = list((await self.db.scalars(pages.newest_first(mine, after, limit))).all())
        assistants = await self._assistants(rows[:limit])
        return pages.make_page(rows, limit, lambda r: to_read(r, assistants.get(r.assistant_id)))

    async def create(self, data: ConversationCreate) -> Conversation:
        now = utc_now()
        row = Conversation(
            user_id=self.user_id,
            created_at=now,
            updated_at=now,
            title=data.title,
            model=data.model,
            system_prompt=data.system_prompt,
        )
        if data.assistant_id is not None:
            # Not the caller's department's, archived, or none: not found, all alike.
            assistant, _ = await AssistantService(self.db).usable(
                data.assistant_id, self.department_id
            )
            row.model = assistant.slug
            row.assistant_id = assistant.id
            row.assistant_version = assistant.current_version
        elif not data.model.strip():
            raise ValueError("model is required (or an assistant_id)")
        self.db.add(row)
        await self.db.flush()
        return row

    async def update(self, conversation_id: uuid.UUID, data: ConversationUpdate) -> Conversation:
        row = await self.touch(conversation_id)
        for name, value in msgspec.structs.asdict(data).items():
            if value is not msgspec.UNSET:
                setattr(row, name, value)
        await self.db.flush()
        return row

    async def delete(self, conversation_id: uuid.UUID) -> None:
        await self.db.delete(await self.get(conversation_id))

    async def detail(self, conversation_id: uuid.UUID) -> ConversationDetail:
        row = await self.get(conversation_id)
        messages = await self.db.scalars(
            select(ConversationMessage)
            .where(ConversationMessage.conversation_id == row.id)
            .order_by(ConversationMessage.position)
        )
        summary = msgspec.structs.asdict(await self.summary(row))
        return ConversationDetail(**summary, messages=[message_read(m) for m in messages])

    async def append(
        self, conversation_id: uuid.UUID, messages: list[MessageCreate]
    ) -> ConversationDetail:
        row = await self.touch(conversation_id)
        last = await self.db.scalar(
            select(func.max(ConversationMessage.position)).where(
                ConversationMessage.conversation_id == row.id
            )
        )
        start = 0 if last is None else last + 1
        if start + len(messages) > MAX_MESSAGES:
            raise ValueError(f"a conversation holds at most {MAX_MESSAGES} messages")
        self.db.add_all(message_row(row, start + i, m) for i, m in enumerate(messages))
        await self.db.flush()
        return await self.detail(row.id)

    async def truncate(self, conversation_id: uuid.UUID, from_position: int) -> ConversationDetail:
        row = await self.touch(conversation_id)
        await self.db.execute(
            delete(ConversationMessage).where(
                ConversationMessage.conversation_id == row.id,
                ConversationMessage.position >= from_position,
            )
        )
        return await self.detail(row.id)
