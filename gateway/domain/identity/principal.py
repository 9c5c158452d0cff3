"""Who is making a request: a signed-in user (session cookie) or an API key."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.db.models import ApiKey, Department, User
from gateway.domain.identity.session_store import SessionData

SESSION_COOKIE = "enclave_session"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class Principal:
    user: User | None = None
    session_id: str = ""
    session: SessionData | None = None
    api_key: ApiKey | None = None
    department: Department | None = None

    @property
    def is_admin(self) -> bool:
        return self.user is not None and self.user.role == "admin"
