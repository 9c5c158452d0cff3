"""Each department's active assistants, kept in memory for a few seconds.

The proxy asks on the request path which assistants a department has; one query loads them
all (slug -> current version), and the answer is reused for ``FRESH_S`` seconds, so a warm
cache costs no database query, an unknown slug included. An admin's edit (a new version, an
archive) therefore applies to requests within ``FRESH_S`` seconds, on every replica. When
the database cannot be reached, a department's last listing is used while it is younger
than the outage grace (the keys' ``ENCLAVE_KEY_OUTAGE_GRACE_SECONDS``); without one,
:class:`AssistantsUnavailable`.

It holds frozen values (`Resolved`), never ORM rows: entries outlive the session that read
them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import and_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models.assistant import Assistant, AssistantVersion
from gateway.domain.assistants.prompt import system_text
from gateway.domain.identity.middleware import DATABASE_DOWN

log = structlog.get_logger("gateway.assistants")

FRESH_S = 5.0  # how long a department's listing is reused (an edit applies within this)
MAX_DEPARTMENTS = 10_000
SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens")


@dataclass(frozen=True, slots=True)
class Resolved:
    """An assistant's current version, as requests use it."""

    assistant_id: uuid.UUID
    slug: str
    version: int
    system_text: str  # prompt.system_text: what the warmer pins, byte for byte
    model: str | None  # None: the pool's default model
    sampling: Mapping[str, Any]  # defaults for temperature, top_p, max_tokens
    created: int  # the assistant's creation, in Unix seconds (its /v1/models card)
    # The response template as OpenAI's json_schema response_format, or None: the worker
    # then constrains the answer to the template (structured outputs).
    response_format: Mapping[str, Any] | None = None

    @property
    def header(self) -> str:
        return f"{self.slug}; version={self.version}"


class AssistantsUnavailable(Exception):
    """The database cannot be reached and no recent listing of the department is held."""


@dataclass(frozen=True, slots=True)
class _Listing:
    loaded_at: float
    assistants: dict[str, Resolved]


class AssistantCache:
    def __init__(
        self,
        db: async_sessionmaker[AsyncSession],
        *,
        fresh_s: float = FRESH_S,
        outage_grace_s: float = 300.0,
        max_departments: int = MAX_DEPARTMENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self.fresh_s = fresh_s
        self.outage_grace_s = outage_grace_s
        self.max_departments = max_departments
        self._clock = clock
        self._listings: OrderedDict[uuid.UUID, _Listing] = OrderedDict()
        # One load per department at a time: a burst after expiry waits on the same query.
        self._loading: dict[uuid.UUID, asyncio.Task[_Listing]] = {}
        self.loads = 0  # database queries made (tests and debugging read it)

    async def of_department(self, department_id: uuid.UUID) -> dict[str, Resolved]:
        """The department's active assistants by slug (cached; see the module's doc)."""
        listing = self._listings.get(department_id)
        if listing is not None and self._clock() - listing.loaded_at < self.fresh_s:
            return listing.assistants
        return (await self._refresh(department_id, listing)).assistants

    def invalidate(self, department_id: uuid.UUID | None = None) -> None:
        """Forget one department's listing (None: all): this process reads it afresh."""
        if department_id is None:
            self._listings.clear()
        else:
            self._listings.pop(department_id, None)

    async def _refresh(self, department_id: uuid.UUID, stale: _Listing | None) -> _Listing:
        # The load is a task of its own: a request that is cancelled while it waits (its
        # client left) neither cancels it nor leaves the others waiting on it for ever.
        loading = self._loading.get(department_id)
        if loading is None:
            loading = asyncio.create_task(self._load(department_id))
            self._loading[department_id] = loading
            loading.add_done_callback(lambda task: self._loaded(department_id, task))
        try:
            return await asyncio.shield(loading)
        except DATABASE_DOWN as exc:
            if stale is not None and self._clock() - stale.loaded_at < self.outage_grace_s:
                log.warning("assistants_stale_listing", department=str(department_id))
                return stale
            raise AssistantsUnavailable(f"{type(exc).__name__}: {exc}") from None

    def _loaded(self, department_id: uuid.UUID, task: asyncio.Task[_Listing]) -> None:
        del self._loading[department_id]
        if not task.cancelled() and task.exception() is None:  # (retrieved: no warning)
            self._store(department_id, task.result())

    def _store(self, department_id: uuid.UUID, listing: _Listing) -> None:
        self._listings[department_id] = listing
        self._listings.move_to_end(department_id)
        while len(self._listings) > self.max_departments:
            self._listings.popitem(last=False)

    async def _load(self, department_id: uuid.UUID) -> _Listing:
        self.loads += 1
        loaded_at = self._clock()
        async with self._db() as db:
            rows = (await db.execute(current_versions(department_id))).all()
        assistants = {assistant.slug: resolved(assistant, version) for assistant, version in rows}
        return _Listing(loaded_at, assistants)


def current_versions(department_id: uuid.UUID | None = None) -> Any:
    """Active assistants with their current version (one department's, or every one)."""
    statement = (
        select(Assistant, AssistantVersion)
        .join(
            AssistantVersion,
            and_(
                AssistantVersion.assistant_id == Assistant.id,
                AssistantVersion.version == Assistant.current_version,
            ),
        )
        .where(Assistant.archived_at.is_(None))
    )
    if department_id is not None:
        statement = statement.where(Assistant.department_id == department_id)
    return statement


def resolved(assistant: Assistant, version: AssistantVersion) -> Resolved:
    sampling = {
        name: value
        for name in SAMPLING_FIELDS
        if (value := (version.sampling or {}).get(name)) is not None
    }
    return Resolved(
        assistant.id,
        assistant.slug,
        version.version,
        system_text(version.system_prompt, version.response_template),
        version.model,
        sampling,
        int(assistant.created_at.timestamp()),
        response_format_of(assistant.slug, version.response_template),
    )


def response_format_of(slug: str, template: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A response template as the json_schema response_format that makes the worker's
    answer fill it (the slug is a valid schema name: letters, digits and dashes)."""
    if not template:
        return None
    return {"type": "json_schema", "json_schema": {"name": slug, "schema": dict(template)}}
