"""`/api/admin/usage`: what the API was used for, summed by day, department, user, key and
way in, read from the rollups (admins only). See docs/usage.md."""

from __future__ import annotations

from litestar import Controller, get
from litestar.di import NamedDependency, Provide
from litestar.params import FromQuery
from litestar.response import Stream
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.identity.guards import require_admin
from gateway.domain.usage import query
from gateway.domain.usage.export import csv_rows
from gateway.domain.usage.schemas import DailyUsage, RefusalCounts, TopUsage
from gateway.state import GatewayState

# Taken as text and parsed by query.UsageFilter: a bad value is a 400 naming the parameter.
Query = FromQuery[str | None]


def provide_filters(
    since: Query = None, until: Query = None, department_id: Query = None
) -> query.UsageFilter:
    """The range (UTC days, both ends included) and department every route shares."""
    return query.UsageFilter.parse(since, until, department_id)


class AdminUsageController(Controller):
    path = "/api/admin/usage"
    guards = [require_admin]  # noqa: RUF012
    dependencies = {"filters": Provide(provide_filters, sync_to_thread=False)}  # noqa: RUF012

    @get("/daily")
    async def daily(
        self, db: NamedDependency[AsyncSession], filters: NamedDependency[query.UsageFilter]
    ) -> DailyUsage:
        """Requests and tokens per day per department, split by way in (web UI or API)."""
        return await query.daily(db, filters)

    @get("/top")
    async def top(
        self,
        db: NamedDependency[AsyncSession],
        filters: NamedDependency[query.UsageFilter],
        by: Query = None,
        limit: Query = None,
    ) -> TopUsage:
        """The users (by=user) or keys (by=key) that used the most tokens."""
        return await query.top(db, filters, query.top_by(by), query.top_limit(limit))

    @get("/refusals")
    async def refusals(
        self, db: NamedDependency[AsyncSession], filters: NamedDependency[query.UsageFilter]
    ) -> RefusalCounts:
        """Requests a limit refused (429), by which limit."""
        return await query.refusals(db, filters)

    # Litestar adds "; charset=utf-8" to a text/ type itself.
    @get("/export.csv", media_type="text/csv")
    async def export_csv(
        self, gateway: NamedDependency[GatewayState], filters: NamedDependency[query.UsageFilter]
    ) -> Stream:
        """Every rollup row in the range: day, department, user, key, via and counters."""
        return Stream(
            csv_rows(gateway.db, filters),
            media_type="text/csv",
            headers={"content-disposition": 'attachment; filename="enclave-usage.csv"'},
        )
