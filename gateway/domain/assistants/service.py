"""Department assistants: create, edit (a new version when what it says changes), archive,
list, and the cards a department's people choose from (docs/assistants.md)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

import msgspec
from sqlalchemy import Select, and_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import utc_now
from gateway.db.models import Assistant, AssistantVersion, Department
from gateway.domain.assistants import slugs
from gateway.domain.assistants.schemas import (
    AssistantCreate,
    AssistantRead,
    AssistantUpdate,
    CardList,
    Sampling,
    VersionList,
)
from gateway.domain.assistants.template import check_template
from gateway.domain.assistants.views import card, to_read, version_read
from gateway.domain.pagination import Page, page_query
from gateway.domain.search_filter import matching
from gateway.errors import NotFoundError

# What a version is: a change to any of these makes a new one.
VERSIONED = ("system_prompt", "model", "sampling", "response_template")
TEXT = ("system_prompt", "model", "response_template")


def _stored_sampling(sampling: Sampling | None) -> dict[str, Any] | None:
    """As the column keeps it: only the values set; none set is no sampling at all."""
    if sampling is None:
        return None
    values = {k: v for k, v in msgspec.structs.asdict(sampling).items() if v is not None}
    return values or None


def _with_current() -> Select[Assistant, AssistantVersion]:
    current = and_(
        AssistantVersion.assistant_id == Assistant.id,
        AssistantVersion.version == Assistant.current_version,
    )
    return select(Assistant, AssistantVersion).join(AssistantVersion, current)


def _check_content(changes: dict[str, Any], department: Department, known: Collection[str]) -> None:
    """What a version says, as far as it is given in ``changes``."""
    prompt = changes.get("system_prompt")
    if prompt is not None and not prompt.strip():
        raise ValueError("system_prompt must not be empty")
    model = changes.get("model")
    if model is not None:
        if not model.strip():
            raise ValueError("model must not be empty (leave it out for the default model)")
        allowed = department.allowed_models
        if allowed is not None and model not in allowed:
            raise ValueError(f"the department may not use the model {model!r}")
        if known and model not in known:
            raise ValueError(f"no worker serves a model {model!r}; they serve {sorted(known)}")
    if changes.get("response_template") is not None:
        check_template(changes["response_template"])


class AssistantService:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def create(
        self, data: AssistantCreate, served_models: Collection[str], by: uuid.UUID | None
    ) -> AssistantRead:
        if not data.name.strip():
            raise ValueError("name must not be empty")
        department = await self._department(data.department_id)
        _check_content(msgspec.structs.asdict(data), department, served_models)
        if data.slug is not None:
            await slugs.check_chosen(self.db, data.slug, served_models)
            slug = data.slug
        else:
            slug = await slugs.derive(self.db, data.name, served_models)
        row = Assistant(
            department_id=department.id,
            slug=slug,
            name=data.name.strip(),
            is_default=False,
            current_version=1,
        )
        self.db.add(row)
        await self.db.flush()
        version = AssistantVersion(
            assistant_id=row.id,
            version=1,
            system_prompt=data.system_prompt,
            model=data.model,
            sampling=_stored_sampling(data.sampling),
            response_template=data.response_template,
            created_by=by,
        )
        self.db.add(version)
        if data.is_default:
            await self._make_default(row)
        await self.db.flush()
        return to_read(row, version, department.name)

    async def get(self, assistant_id: uuid.UUID) -> AssistantRead:
        found = (await self.db.execute(_with_current().where(Assistant.id == assistant_id))).first()
        if found is None:
            raise NotFoundError("no such assistant")
        row, version = found
        return to_read(row, version, (await self._department(row.department_id)).name)

    async def update(
        self,
        assistant_id: uuid.UUID,
        data: AssistantUpdate,
        served_models: Collection[str],
        by: uuid.UUID | None,
    ) -> AssistantRead:
        row = await self._row(assistant_id)
        if row.archived_at is not None:
            raise ValueError("this assistant is archived; it cannot be changed")
        changes = {k: v for k, v in msgspec.structs.asdict(data).items() if v is not msgspec.UNSET}
        if "name" in changes:
            if not changes["name"].strip():
                raise ValueError("name must not be empty")
            row.name = changes["name"].strip()
        department = await self._department(row.department_id)
        _check_content(changes, department, served_models)
        current = await self._version(row)
        wanted = {name: getattr(current, name) for name in VERSIONED}
        if "sampling" in changes:
            changes["sampling"] = _stored_sampling(changes["sampling"])
        wanted.update({k: v for k, v in changes.items() if k in VERSIONED})
        if any(wanted[name] != getattr(current, name) for name in VERSIONED):
            # The same system message on the same model: the same count of its tokens.
            same_text = all(wanted[n] == getattr(current, n) for n in TEXT)
            current = AssistantVersion(
                assistant_id=row.id,
                version=row.current_version + 1,
                prompt_tokens=current.prompt_tokens if same_text else None,
                created_by=by,
                **wanted,
            )
            self.db.add(current)
            row.current_version = current.version
        if changes.get("is_default") is True and not row.is_default:
            await self._make_default(row)
        elif changes.get("is_default") is False:
            row.is_default = False
        row.updated_at = utc_now()
        await self.db.flush()
        return to_read(row, current, department.name)

    async def archive(self, assistant_id: uuid.UUID) -> AssistantRead:
        """Archived: gone for its department's people and keys, kept for the records that
        name it. Idempotent."""
        row = await self._row(assistant_id)
        if row.archived_at is None:
            row.archived_at = utc_now()
            row.is_default = False
            await self.db.flush()
        return await self.get(assistant_id)

    async def list_page(
        self,
        after: str | None,
        limit: int,
        department_id: uuid.UUID | None = None,
        q: str | None = None,
        include_archived: bool = False,
    ) -> Page[AssistantRead]:
        statement = _with_current().add_columns(Department.name)
        statement = statement.join(Department, Department.id == Assistant.department_id)
        if department_id is not None:
            statement = statement.where(Assistant.department_id == department_id)
        if not include_archived:
            statement = statement.where(Assistant.archived_at.is_(None))
        condition = matching(q, Assistant.name, Assistant.slug)
        if condition is not None:
            statement = statement.where(condition)
        rows = (await self.db.execute(page_query(statement, Assistant.id, after, limit))).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(
            items=[to_read(row, version, name) for row, version, name in rows],
            next_cursor=str(rows[-1][0].id) if more else None,
        )

    async def versions(self, assistant_id: uuid.UUID) -> VersionList:
        await self._row(assistant_id)
        found = await self.db.scalars(
            select(AssistantVersion)
            .where(AssistantVersion.assistant_id == assistant_id)
            .order_by(AssistantVersion.version.desc())
        )
        return VersionList([version_read(v) for v in found])

    async def cards(self, department_id: uuid.UUID | None) -> CardList:
        """The department's active assistants: the default first, then by name."""
        if department_id is None:
            return CardList([])
        found = (await self.db.execute(self._active(department_id))).all()
        ordered = sorted(
            found, key=lambda f: (not f[0].is_default, f[0].name.casefold(), f[0].slug)
        )
        return CardList([card(row, version) for row, version in ordered])

    async def usable(
        self, assistant_id: uuid.UUID, department_id: uuid.UUID | None
    ) -> tuple[Assistant, AssistantVersion]:
        """The assistant and its current version, if the department may use it now; any
        other (archived, another department's, none) is not found."""
        if department_id is not None:
            statement = self._active(department_id).where(Assistant.id == assistant_id)
            found = (await self.db.execute(statement)).first()
            if found is not None:
                return found[0], found[1]
        raise NotFoundError("no such assistant")

    def _active(self, department_id: uuid.UUID) -> Select[Assistant, AssistantVersion]:
        return _with_current().where(
            Assistant.department_id == department_id, Assistant.archived_at.is_(None)
        )

    async def _department(self, department_id: uuid.UUID) -> Department:
        department = await self.db.get(Department, department_id)
        if department is None:
            raise NotFoundError("no such department")
        return department

    async def _row(self, assistant_id: uuid.UUID) -> Assistant:
        row = await self.db.get(Assistant, assistant_id)
        if row is None:
            raise NotFoundError("no such assistant")
        return row

    async def _version(self, row: Assistant) -> AssistantVersion:
        version = await self.db.scalar(
            select(AssistantVersion).where(
                AssistantVersion.assistant_id == row.id,
                AssistantVersion.version == row.current_version,
            )
        )
        if version is None:  # the tables' invariant: every assistant has its current version
            raise LookupError(f"assistant {row.id} has no version {row.current_version}")
        return version

    async def _make_default(self, row: Assistant) -> None:
        """At most one default per department: the department's row is locked (Postgres;
        SQLite has one writer anyway) so that two admins' defaults cannot both stand."""
        await self.db.execute(
            select(Department.id).where(Department.id == row.department_id).with_for_update()
        )
        await self.db.execute(
            update(Assistant)
            .where(
                Assistant.department_id == row.department_id,
                Assistant.id != row.id,
                Assistant.is_default.is_(True),
            )
            .values(is_default=False, updated_at=utc_now())
        )
        row.is_default = True
