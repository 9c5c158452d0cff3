"""One API request, as data: who sent it, what it asked for, what it reserved.

The handlers fill it in as the request goes; `accounting.py` ends it. It holds no route to
any service (limiter, metrics, audit writer): those are handed to whatever needs them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from gateway.db.base import utc_now
from gateway.domain.identity.principal import Principal
from gateway.domain.proxy.sse import Usage

if TYPE_CHECKING:
    from gateway.domain.limits.types import Reservation


@dataclass(slots=True)
class Exchange:
    principal: Principal
    endpoint: str
    request_id: str
    client_ip: str
    user_agent: str
    # Whether the audit record keeps the bodies (the department says), and their cap.
    keeps_bodies: bool = False
    body_cap: int = 0
    started: float = field(default_factory=time.perf_counter)
    started_at: datetime = field(default_factory=utc_now)
    model: str = ""
    streamed: bool = False
    estimated_prompt_tokens: int = 0
    reservation: Reservation | None = None
    upstream: str = ""
    prompt_body: str | None = None
    finished: bool = False
    client_request_id: str = ""  # the caller's X-Request-Id, if it sent a plain one
    # The department assistant the request named (its slug and the version used), if any.
    assistant: str = ""
    assistant_version: int = 0


@dataclass(frozen=True, slots=True)
class Ending:
    """How a request ended, as its handler saw it."""

    status: int
    usage: Usage | None = None  # None: the worker sent none (or was never asked)
    reason: str = ""
    error: str = ""
    first_token_at: float | None = None
    response_body: str | None = None
    completion_chunks: int = 0
