from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, IdMixin, utc_now


class AuditRecord(IdMixin, Base):
    """Who did what to which thing, and when. The traffic issue writes one per request.

    The actor is a snapshot (email, department) so a record stays readable after the
    user or department is gone; hence no foreign keys.
    """

    __tablename__ = "audit_records"
    __table_args__ = (
        Index("ix_audit_records_actor_created", "actor_id", "created_at"),
        Index("ix_audit_records_department_created", "department_id", "created_at"),
    )

    created_at: Mapped[datetime] = mapped_column(default=utc_now, index=True)
    action: Mapped[str] = mapped_column(String(100), index=True)  # dotted, e.g. "key.revoke"
    actor_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    actor_email: Mapped[str] = mapped_column(String(320), default="")
    api_key_id: Mapped[uuid.UUID | None] = mapped_column(default=None, index=True)
    department_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    target_type: Mapped[str] = mapped_column(String(50), default="")
    target_id: Mapped[str] = mapped_column(String(100), default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    prompt_tokens: Mapped[int] = mapped_column(default=0)
    completion_tokens: Mapped[int] = mapped_column(default=0)
    status_code: Mapped[int | None] = mapped_column(default=None)
    ip_address: Mapped[str] = mapped_column(String(64), default="")
    user_agent: Mapped[str] = mapped_column(String(500), default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
