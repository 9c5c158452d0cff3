"""Who is making a request: a signed-in user (session cookie) or an API key.

Its key and department are frozen snapshots (snapshots.py) and its user a frozen
`UserRead`, never ORM rows: a principal is cached across requests and read after its
database session has closed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.domain.identity.session_store import SessionData
from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot
from gateway.domain.users.schemas import UserRead

SESSION_COOKIE = "enclave_session"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class Principal:
    user: UserRead | None = None
    session_id: str = ""
    session: SessionData | None = None
    api_key: KeySnapshot | None = None
    department: DepartmentSnapshot | None = None

    @property
    def is_admin(self) -> bool:
        return self.user is not None and self.user.role == "admin"
