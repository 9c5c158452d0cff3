from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin, IdMixin

ROLES = ("admin", "member")


class User(IdMixin, CreatedMixin, Base):
    """A person: from the IdP (``subject``) or the local break-glass admin (``password_hash``)."""

    __tablename__ = "users"

    # "issuer|sub" for IdP users, "local|email" for the break-glass account.
    subject: Mapped[str] = mapped_column(String(500), unique=True, index=True)
    email: Mapped[str] = mapped_column(String(320), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    department_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("departments.id", ondelete="SET NULL"), index=True, default=None
    )
    role: Mapped[str] = mapped_column(String(20), default="member")
    is_active: Mapped[bool] = mapped_column(default=True)
    password_hash: Mapped[str | None] = mapped_column(String(200), default=None)
    last_login_at: Mapped[datetime | None] = mapped_column(default=None)
