"""`/api/admin/audit`: search the audit log (requests and admin actions) and export it as CSV
(admins only)."""

from __future__ import annotations

from litestar import Controller, Request, get, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import ServiceUnavailableException
from litestar.params import FromPath, FromQuery
from litestar.response import Stream
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import RequestRecord
from gateway.domain.audit import query
from gateway.domain.audit.actions import action_entry
from gateway.domain.audit.console_verify import VerifyRead
from gateway.domain.audit.events import actor_of
from gateway.domain.audit.export import csv_rows
from gateway.domain.audit.schemas import RecordDetail, RecordRead, to_detail, to_read
from gateway.domain.identity.guards import require_admin
from gateway.domain.pagination import Page
from gateway.errors import NotFoundError
from gateway.state import GatewayState

# Every parameter is taken as text and parsed by query.AuditFilter: a bad value is a 400
# that names the parameter.
Query = FromQuery[str | None]


def provide_filters(
    since: Query = None,
    until: Query = None,
    department_id: Query = None,
    user_id: Query = None,
    api_key_id: Query = None,
    status: Query = None,
    request_id: Query = None,
    action: Query = None,
    client_request_id: Query = None,
) -> query.AuditFilter:
    """The filters search and export share, from the query string."""
    return query.AuditFilter.parse(
        since,
        until,
        department_id,
        user_id,
        api_key_id,
        status,
        request_id,
        action,
        client_request_id,
    )


class AuditController(Controller):
    path = "/api/admin/audit"
    guards = [require_admin]  # noqa: RUF012
    dependencies = {"filters": Provide(provide_filters, sync_to_thread=False)}  # noqa: RUF012

    @get("/")
    async def search(
        self,
        db: NamedDependency[AsyncSession],
        filters: NamedDependency[query.AuditFilter],
        after: Query = None,
        limit: Query = None,
    ) -> Page[RecordRead]:
        size = query.page_size(limit)
        statement = query.newest_first(filters, query.cursor(after), size + 1)
        rows = (await db.scalars(statement)).all()
        more = len(rows) > size
        rows = rows[:size]
        return Page([to_read(r) for r in rows], str(rows[-1].seq) if more else None)

    # Litestar adds "; charset=utf-8" to a text/ type itself (it doubled one given here).
    @get("/export.csv", media_type="text/csv")
    async def export_csv(
        self, gateway: NamedDependency[GatewayState], filters: NamedDependency[query.AuditFilter]
    ) -> Stream:
        return Stream(
            csv_rows(gateway.db, filters),
            media_type="text/csv",
            headers={"content-disposition": 'attachment; filename="enclave-audit.csv"'},
        )

    @get("/{seq:int}")
    async def get_record(
        self, db: NamedDependency[AsyncSession], seq: FromPath[int]
    ) -> RecordDetail:
        """One record with its bodies (when the department keeps them) and its prev_hash."""
        # A number past BIGINT names no record, and the driver would fail on it.
        record = await db.get(RequestRecord, seq) if 1 <= seq <= query.MAX_SEQ else None
        if record is None:
            raise NotFoundError("no such audit record")
        return to_detail(record)

    @post("/verify", status_code=200)
    async def verify(self, request: Request, gateway: NamedDependency[GatewayState]) -> VerifyRead:
        """Walk the chain as `enclave audit verify` does (console_verify.py says how it
        stays off the writer's way); the check itself is an audit record, verdict included."""
        try:
            result = await gateway.verification.run()
        except OSError as exc:  # the head log, outside the database, could not be read
            raise ServiceUnavailableException(
                f"the audit head log could not be read: {exc}"
            ) from exc
        verdict: dict[str, object] = {
            "ok": result.ok,
            "checked": result.checked,
            "head_seq": result.head_seq,
        }
        if not result.ok:
            verdict.update(bad_seq=result.bad_seq, reason=result.reason)
        entry = action_entry(actor_of(request), "audit.verify", "audit_chain", None, extra=verdict)
        gateway.audit.submit(entry)
        return result
