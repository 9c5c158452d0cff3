from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin, IdMixin


class ApiKey(IdMixin, CreatedMixin, Base):
    """A department's key for the OpenAI API. Only a keyed hash of the secret is stored."""

    __tablename__ = "api_keys"

    department_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("departments.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    # HMAC-SHA256(secret_key, key), hex: the one indexed lookup on every API request.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    # The first characters of the key, so admins can tell keys apart; not enough to use.
    display_prefix: Mapped[str] = mapped_column(String(20))
    allowed_models: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    # The key's own limits, on top of its department's: None means no limit of its own.
    requests_per_minute: Mapped[int | None] = mapped_column(default=None)
    tokens_per_minute: Mapped[int | None] = mapped_column(BigInteger, default=None)
    concurrent_requests: Mapped[int | None] = mapped_column(default=None)
    daily_token_quota: Mapped[int | None] = mapped_column(BigInteger, default=None)
    monthly_token_quota: Mapped[int | None] = mapped_column(BigInteger, default=None)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    created_by_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    rotated_from_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="SET NULL"), default=None
    )
