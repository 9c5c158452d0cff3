"""Assistant rows as the API shows them: to admins (all of it), to people (a card)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.db.base import as_utc
from gateway.db.models import Assistant, AssistantVersion
from gateway.domain.assistants.schemas import (
    AssistantCard,
    AssistantRead,
    AssistantVersionRead,
    Sampling,
)


def sampling_of(stored: dict[str, Any] | None) -> Sampling | None:
    return msgspec.convert(stored, Sampling) if stored else None


def to_read(row: Assistant, version: AssistantVersion, department_name: str) -> AssistantRead:
    return AssistantRead(
        id=row.id,
        department_id=row.department_id,
        department_name=department_name,
        slug=row.slug,
        name=row.name,
        is_default=row.is_default,
        version=row.current_version,
        system_prompt=version.system_prompt,
        model=version.model,
        sampling=sampling_of(version.sampling),
        response_template=version.response_template,
        prompt_tokens=version.prompt_tokens,
        archived=row.archived_at is not None,
        created_at=as_utc(row.created_at),
        updated_at=as_utc(row.updated_at),
    )


def version_read(version: AssistantVersion) -> AssistantVersionRead:
    return AssistantVersionRead(
        version=version.version,
        system_prompt=version.system_prompt,
        model=version.model,
        sampling=sampling_of(version.sampling),
        response_template=version.response_template,
        prompt_tokens=version.prompt_tokens,
        created_at=as_utc(version.created_at),
        created_by=version.created_by,
    )


def card(row: Assistant, version: AssistantVersion) -> AssistantCard:
    return AssistantCard(
        id=row.id,
        slug=row.slug,
        name=row.name,
        is_default=row.is_default,
        version=row.current_version,
        model=version.model,
        prompt_tokens=version.prompt_tokens,
        response_template=version.response_template,
        sampling=sampling_of(version.sampling),
    )
