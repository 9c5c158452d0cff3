"""What the admin API adds to an assistant it answers with: the prefix warmer's status of
it (``GatewayState.warmer``, warming.py), and its audit form.

The warmer is asked to sync by ``provide_db`` after an admin write has committed (a sync
asked from the handler would run before the commit and read the old version).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import Request

from gateway.domain.assistants.schemas import AssistantRead, WarmStatus

if TYPE_CHECKING:
    from gateway.state import GatewayState


def warm_status_of(request: Request[Any, Any, Any], assistant_id: uuid.UUID) -> WarmStatus | None:
    state: GatewayState = request.app.state.gateway
    return state.warmer.status(assistant_id)


def with_warm(request: Request[Any, Any, Any], read: AssistantRead) -> AssistantRead:
    read.warm = warm_status_of(request, read.id)
    return read


def audited(read: AssistantRead | None) -> dict[str, Any] | None:
    """What the audit log keeps of an assistant: the system prompt as its length and digest
    (every version's text is kept in assistant_versions, never changed), no warm status."""
    if read is None:
        return None
    values = msgspec.to_builtins(read)
    prompt = values.pop("system_prompt")
    values.pop("warm", None)
    values.pop("updated_at", None)
    values["system_prompt_chars"] = len(prompt)
    values["system_prompt_sha256"] = hashlib.sha256(prompt.encode()).hexdigest()
    return dict(values)
