"""Indexes for the admin console's slow calls (found by `enclave bench console`)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 16:15:00.000000

usage_daily gets (user_id, day) for top?by=user's second query, (day, id) for the export's
keyset order, and a partial index on day for the rows with a refusal (the refusals query
reads only those). On Postgres the admin lists' ``q`` (``col ILIKE '%q%'``) gets pg_trgm GIN
indexes on users (email, name) and api_keys (name, display_prefix); pg_trgm lowercases its
trigrams, so an index on the column itself serves ILIKE. pg_trgm is a trusted extension
(Postgres 13+): a role with CREATE on the database may create it. Where it is missing and
cannot be created, the upgrade goes on without those four indexes (a log line says so), and
the search stays a scan. The downgrade drops the indexes but leaves the extension, which
something else may use.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import structlog
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = structlog.get_logger("gateway.migrations")

# (index, table, column): repeated here rather than imported from gateway.db.trigram, as a
# revision must not follow later changes to the code.
TRIGRAM = (
    ("ix_users_email_trgm", "users", "email"),
    ("ix_users_name_trgm", "users", "name"),
    ("ix_api_keys_name_trgm", "api_keys", "name"),
    ("ix_api_keys_display_prefix_trgm", "api_keys", "display_prefix"),
)


def upgrade() -> None:
    op.create_index("ix_usage_daily_user_day", "usage_daily", ["user_id", "day"])
    op.create_index("ix_usage_daily_day_id", "usage_daily", ["day", "id"])
    op.create_index(
        "ix_usage_daily_refused_day",
        "usage_daily",
        ["day"],
        postgresql_where=sa.text("refusals > 0"),
        sqlite_where=sa.text("refusals > 0"),
    )
    if op.get_bind().dialect.name == "postgresql":
        schema = _trigram_schema()
        if schema is not None:
            for name, table, column in TRIGRAM:
                op.execute(
                    f"CREATE INDEX {name} ON {table} USING gin ({column} {schema}.gin_trgm_ops)"
                )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, _table, _column in TRIGRAM:
            op.execute(f"DROP INDEX IF EXISTS {name}")
    op.drop_index("ix_usage_daily_refused_day", table_name="usage_daily")
    op.drop_index("ix_usage_daily_day_id", table_name="usage_daily")
    op.drop_index("ix_usage_daily_user_day", table_name="usage_daily")


def _trigram_schema() -> str | None:
    """The schema pg_trgm is installed in, creating it first if need be; None where this
    server lacks it or this role may not create it. The attempt runs in a SAVEPOINT, so a
    refusal does not abort the upgrade's transaction."""
    bind = op.get_bind()
    installed = sa.text(
        "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'"
    )
    schema = bind.execute(installed).scalar()
    if schema is not None:
        return str(schema)
    available = sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
    if bind.execute(available).scalar() is None:
        log.warning("pg_trgm is not available on this server: no trigram search indexes")
        return None
    try:
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except sa.exc.DBAPIError as error:
        log.warning(
            "could not create extension pg_trgm: no trigram search indexes",
            error=str(error.orig).strip(),
        )
        return None
    return str(bind.execute(installed).scalar())
