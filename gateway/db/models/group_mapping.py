from __future__ import annotations

import uuid

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base, CreatedMixin, IdMixin


class GroupMapping(IdMixin, CreatedMixin, Base):
    """An IdP group that places its members in a department."""

    __tablename__ = "group_mappings"

    group: Mapped[str] = mapped_column(String(300), unique=True, index=True)
    department_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("departments.id", ondelete="CASCADE"), index=True
    )
