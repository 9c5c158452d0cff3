"""`/api/admin/assistants` (admins: write and read every department's) and `/api/assistants`
(a signed-in user: the cards of their own department's active assistants)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, Request, delete, get, patch, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.assistants.extract import MAX_UPLOAD_BYTES, extract_text
from gateway.domain.assistants.schemas import (
    AssistantCreate,
    AssistantRead,
    AssistantUpdate,
    CardList,
    ExtractedText,
    TokenCount,
    TokenCountRequest,
    VersionList,
)
from gateway.domain.assistants.service import AssistantService
from gateway.domain.assistants.tokens import count_tokens
from gateway.domain.assistants.warm_hooks import audited, with_warm
from gateway.domain.audit.events import record_admin_action
from gateway.domain.identity.guards import require_admin, require_user
from gateway.domain.identity.principal import Principal
from gateway.domain.pagination import Page
from gateway.domain.proxy.traffic import Traffic

Id = FromPath[uuid.UUID]
# The multipart envelope around a 10 MiB file.
UPLOAD_BODY_BYTES = MAX_UPLOAD_BYTES + 64 * 1024


@dataclass
class AssistantFile:
    """POST /api/admin/assistants/extract: one file, as multipart/form-data ``file``."""

    file: UploadFile


def _traffic(request: Request[Any, Any, Any]) -> Traffic:
    traffic: Traffic = request.app.state.traffic
    return traffic


def _known_models(request: Request[Any, Any, Any]) -> list[str]:
    """Every model a worker has listed: no slug may be one, and a version's model must be."""
    return _traffic(request).pool.known_models()


def _actor(principal: Principal) -> uuid.UUID | None:
    return principal.user.id if principal.user else None


class AssistantAdminController(Controller):
    path = "/api/admin/assistants"
    guards = [require_admin]  # noqa: RUF012  (Litestar reads it as a class attribute)

    @get("/")
    async def list_assistants(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        after: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
        department_id: FromQuery[uuid.UUID | None] = None,
        q: FromQuery[str | None] = None,
        include_archived: FromQuery[bool] = False,
    ) -> Page[AssistantRead]:
        """Assistants by id; ``q`` matches a substring of the name or slug, in any case."""
        page = await AssistantService(db).list_page(
            after, limit, department_id, q, include_archived
        )
        page.items = [with_warm(request, item) for item in page.items]
        return page

    @post("/")
    async def create_assistant(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        principal: NamedDependency[Principal],
        data: JSONBody[AssistantCreate],
    ) -> AssistantRead:
        service = AssistantService(db)
        created = await service.create(data, _known_models(request), _actor(principal))
        record_admin_action(
            request, "assistant.create", "assistant", created.id, None, audited(created)
        )
        return with_warm(request, created)

    @get("/{assistant_id:uuid}")
    async def get_assistant(
        self, request: Request, db: NamedDependency[AsyncSession], assistant_id: Id
    ) -> AssistantRead:
        return with_warm(request, await AssistantService(db).get(assistant_id))

    @patch("/{assistant_id:uuid}")
    async def update_assistant(
        self,
        request: Request,
        db: NamedDependency[AsyncSession],
        principal: NamedDependency[Principal],
        assistant_id: Id,
        data: JSONBody[AssistantUpdate],
    ) -> AssistantRead:
        service = AssistantService(db)
        before = await service.get(assistant_id)
        after = await service.update(assistant_id, data, _known_models(request), _actor(principal))
        record_admin_action(
            request, "assistant.update", "assistant", assistant_id, audited(before), audited(after)
        )
        return with_warm(request, after)

    @delete("/{assistant_id:uuid}")
    async def archive_assistant(
        self, request: Request, db: NamedDependency[AsyncSession], assistant_id: Id
    ) -> None:
        """Archive: the department's people and keys lose it; its rows and slug stay."""
        service = AssistantService(db)
        before = await service.get(assistant_id)
        after = await service.archive(assistant_id)
        record_admin_action(
            request, "assistant.archive", "assistant", assistant_id, audited(before), audited(after)
        )

    @get("/{assistant_id:uuid}/versions")
    async def list_versions(
        self, db: NamedDependency[AsyncSession], assistant_id: Id
    ) -> VersionList:
        """Every version, newest first."""
        return await AssistantService(db).versions(assistant_id)

    @post("/tokens", status_code=200)
    async def count_prompt_tokens(
        self, request: Request, data: JSONBody[TokenCountRequest]
    ) -> TokenCount:
        """The text's length in tokens, as a system message, counted by a worker serving
        ``model`` (absent: the default model)."""
        return await count_tokens(_traffic(request), data.text, data.model)

    @post("/extract", status_code=200, request_max_body_size=UPLOAD_BODY_BYTES)
    async def extract_file_text(
        self, data: Annotated[AssistantFile, Body(media_type=RequestEncodingType.MULTI_PART)]
    ) -> ExtractedText:
        """The text of a .txt, .md or .pdf file (at most 10 MiB), to write a prompt from."""
        content = await data.file.read()
        return await asyncio.to_thread(extract_text, data.file.filename or "", content)


class AssistantController(Controller):
    path = "/api/assistants"
    guards = [require_user]  # noqa: RUF012

    @get("/")
    async def list_cards(
        self, db: NamedDependency[AsyncSession], principal: NamedDependency[Principal]
    ) -> CardList:
        """The caller's department's active assistants: the default first, then by name."""
        department = principal.department.id if principal.department else None
        return await AssistantService(db).cards(department)
