"""The scopes a request is limited by, from its principal's snapshots.

The snapshots are taken from the database on the request's lookup, or reused from one a
short while ago under the same config generation, so an admin's change applies to the next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.domain.limits.types import Scope

if TYPE_CHECKING:  # only their fields are read; a replica's limiter need not load the ORM
    from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot


def scopes_for(department: DepartmentSnapshot | None, api_key: KeySnapshot | None) -> list[Scope]:
    """The department's scope, then the key's own (a key is held to both)."""
    scopes = []
    if department is not None:
        label = f"department {department.slug}"
        scopes.append(Scope(f"dept:{department.id}", department.limits, label))
    if api_key is not None:
        scopes.append(Scope(f"key:{api_key.id}", api_key.limits, f"key {api_key.name}"))
    return scopes
