from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, String, false
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin, IdMixin, utc_now


class Department(IdMixin, CreatedMixin, Base):
    """A unit that owns users, keys and a share of the appliance."""

    __tablename__ = "departments"

    name: Mapped[str] = mapped_column(String(200))
    slug: Mapped[str] = mapped_column(String(100), unique=True, index=True)
    # Limits and quotas: None means unlimited. Enforced per department by the limiter.
    monthly_token_quota: Mapped[int | None] = mapped_column(BigInteger, default=None)
    daily_token_quota: Mapped[int | None] = mapped_column(BigInteger, default=None)
    requests_per_minute: Mapped[int | None] = mapped_column(default=None)
    tokens_per_minute: Mapped[int | None] = mapped_column(BigInteger, default=None)
    concurrent_requests: Mapped[int | None] = mapped_column(default=None)
    # Whether the audit log keeps prompt and response bodies (capped) for this department.
    audit_bodies: Mapped[bool] = mapped_column(default=False, server_default=false())
    # None means every model; a list limits the department to those model names.
    allowed_models: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    scheduling_weight: Mapped[int] = mapped_column(default=1)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now, onupdate=utc_now)
