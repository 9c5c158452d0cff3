from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin


class LoginSession(CreatedMixin, Base):
    """A signed-in browser, for the embedded default (production keeps these in Redis)."""

    __tablename__ = "sessions"

    # SHA-256 of the cookie value: a copy of this table does not let anyone sign in.
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    csrf_token: Mapped[str] = mapped_column(String(64))
    last_seen_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)
    # Kept for RP-initiated logout (id_token_hint); empty for the local admin.
    id_token: Mapped[str] = mapped_column(Text, default="")
