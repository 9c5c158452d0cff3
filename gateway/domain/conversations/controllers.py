"""`/api/conversations`: the signed-in user's own conversations (sessions only: they belong
to people, not to API keys). Not audited: they are user content, not admin actions; the chat
requests themselves are audited by the proxy."""

from __future__ import annotations

import uuid

from litestar import Controller, delete, get, patch, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.conversations import search
from gateway.domain.conversations.schemas import (
    ConversationCreate,
    ConversationDetail,
    ConversationRead,
    ConversationUpdate,
    MessagesAppend,
    SearchResults,
    Truncate,
)
from gateway.domain.conversations.service import ConversationService
from gateway.domain.identity.guards import require_user
from gateway.domain.identity.principal import Principal
from gateway.domain.pagination import Page

Id = FromPath[uuid.UUID]


def provide_service(
    db: NamedDependency[AsyncSession], principal: NamedDependency[Principal]
) -> ConversationService:
    if principal.user is None:  # require_user has refused such a caller already
        raise PermissionError("sign in first")
    department = principal.department.id if principal.department else None
    return ConversationService(db, principal.user.id, department)


class ConversationController(Controller):
    path = "/api/conversations"
    guards = [require_user]  # noqa: RUF012  (Litestar reads it as a class attribute)
    dependencies = {"conversations": Provide(provide_service, sync_to_thread=False)}  # noqa: RUF012

    @get("/")
    async def list_conversations(
        self,
        conversations: NamedDependency[ConversationService],
        after: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
    ) -> Page[ConversationRead]:
        return await conversations.list_page(after, limit)

    @get("/search")
    async def search_messages(
        self,
        conversations: NamedDependency[ConversationService],
        q: FromQuery[str | None] = None,
        limit: FromQuery[int] = search.DEFAULT_HITS,
    ) -> SearchResults:
        hits = await search.search(conversations.db, conversations.user_id, q, limit)
        return SearchResults(hits)

    @post("/")
    async def create_conversation(
        self,
        conversations: NamedDependency[ConversationService],
        data: JSONBody[ConversationCreate],
    ) -> ConversationRead:
        return await conversations.summary(await conversations.create(data))

    @get("/{conversation_id:uuid}")
    async def get_conversation(
        self, conversations: NamedDependency[ConversationService], conversation_id: Id
    ) -> ConversationDetail:
        return await conversations.detail(conversation_id)

    @patch("/{conversation_id:uuid}")
    async def update_conversation(
        self,
        conversations: NamedDependency[ConversationService],
        conversation_id: Id,
        data: JSONBody[ConversationUpdate],
    ) -> ConversationRead:
        return await conversations.summary(await conversations.update(conversation_id, data))

    @delete("/{conversation_id:uuid}")
    async def delete_conversation(
        self, conversations: NamedDependency[ConversationService], conversation_id: Id
    ) -> None:
        await conversations.delete(conversation_id)

    @post("/{conversation_id:uuid}/messages")
    async def append_messages(
        self,
        conversations: NamedDependency[ConversationService],
        conversation_id: Id,
        data: JSONBody[MessagesAppend],
    ) -> ConversationDetail:
        return await conversations.append(conversation_id, data.messages)

    @post("/{conversation_id:uuid}/truncate", status_code=200)
    async def truncate_messages(
        self,
        conversations: NamedDependency[ConversationService],
        conversation_id: Id,
        data: JSONBody[Truncate],
    ) -> ConversationDetail:
        return await conversations.truncate(conversation_id, data.from_position)
