"""A verified ID token to a user row: created on first login, updated on every login."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.base import utc_now
from gateway.db.models import Department, GroupMapping, User


async def department_for_groups(db: AsyncSession, groups: list[str]) -> Department | None:
    """The admin's mapping table first; otherwise a department whose slug or name is a group."""
    if not groups:
        return None
    mapped = await db.scalar(
        select(Department)
        .join(GroupMapping, GroupMapping.department_id == Department.id)
        .where(GroupMapping.group.in_(groups))
        .order_by(GroupMapping.group)
        .limit(1)
    )
    if mapped is not None:
        return mapped
    lowered = [g.lower() for g in groups]
    return await db.scalar(
        select(Department)
        .where(or_(Department.slug.in_(lowered), func.lower(Department.name).in_(lowered)))
        .order_by(Department.slug)
        .limit(1)
    )


async def provision_user(
    db: AsyncSession, issuer: str, claims: dict[str, Any], groups_claim: str, admin_group: str
) -> User:
    raw_groups = claims.get(groups_claim) or []
    groups = [str(g) for g in raw_groups] if isinstance(raw_groups, list) else [str(raw_groups)]
    subject = f"{issuer}|{claims['sub']}"
    user = await db.scalar(select(User).where(User.subject == subject))
    if user is None:
        user = User(subject=subject, email="", is_active=True)
        db.add(user)
    elif not user.is_active:
        raise PermissionError("this account is deactivated")
    department = await department_for_groups(db, groups)
    # The IdP is the source of truth: changes there apply at the next login.
    user.email = str(claims.get("email") or "")
    user.name = str(claims.get("name") or "")
    user.department_id = department.id if department else None
    user.role = "admin" if admin_group and admin_group in groups else "member"
    user.last_login_at = utc_now()
    await db.flush()
    return user
