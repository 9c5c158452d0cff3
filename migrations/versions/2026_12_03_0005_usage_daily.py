"""usage_daily: API requests summed per UTC day, department, user, key and via

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 16:00:00.000000

The audit writer keeps the rows from here on (gateway/domain/usage/rollup.py); this
revision sums the API request records already in request_records into them, so the
console's history starts with the audit log's rather than with the upgrade. A row's id is
uuid5 of its bucket, computed as rollup.bucket_id does (repeated here, as a revision must
not follow later changes to the code).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BUCKET_NAMESPACE = uuid.UUID('5d0c6f0e-3b1a-4e53-9a53-0e6c1d7a2b10')
VIA_UI = '{"via":"ui"}'
REASONS = (
    'requests_per_minute',
    'tokens_per_minute',
    'concurrent_requests',
    'tokens_per_day',
    'tokens_per_month',
)
COUNTERS = (
    'requests',
    'prompt_tokens',
    'completion_tokens',
    'cached_tokens',
    'errors',
    'refusals',
    *(f'refused_{reason}' for reason in REASONS),
)


def upgrade() -> None:
    op.create_table(
        'usage_daily',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('day', sa.Date(), nullable=False),
        sa.Column('department_id', sa.Uuid(), nullable=True),
        sa.Column('user_id', sa.Uuid(), nullable=True),
        sa.Column('api_key_id', sa.Uuid(), nullable=True),
        sa.Column('via', sa.String(length=8), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in COUNTERS),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_daily')),
    )
    op.create_index('ix_usage_daily_day_department', 'usage_daily', ['day', 'department_id'])
    op.create_index('ix_usage_daily_department_day', 'usage_daily', ['department_id', 'day'])
    _backfill()


def downgrade() -> None:
    op.drop_index('ix_usage_daily_department_day', table_name='usage_daily')
    op.drop_index('ix_usage_daily_day_department', table_name='usage_daily')
    op.drop_table('usage_daily')


def _backfill() -> None:
    """Sum the existing API request records, grouped by the database, into the table."""
    bind = op.get_bind()
    records = sa.table(
        'request_records',
        sa.column('created_at', sa.DateTime(timezone=True)),
        sa.column('action', sa.String()),
        sa.column('department_id', sa.Uuid()),
        sa.column('user_id', sa.Uuid()),
        sa.column('api_key_id', sa.Uuid()),
        sa.column('details', sa.Text()),
        sa.column('status_code', sa.Integer()),
        sa.column('reason', sa.String()),
        sa.column('prompt_tokens', sa.Integer()),
        sa.column('completion_tokens', sa.Integer()),
        sa.column('cached_tokens', sa.Integer()),
    )
    r = records.c
    if bind.dialect.name == 'postgresql':
        day: Any = sa.func.date(sa.func.timezone('UTC', r.created_at))
    else:  # SQLite keeps UTC times as text; date() reads its first ten characters
        day = sa.func.substr(r.created_at, 1, 10)
    via = sa.case((r.details == VIA_UI, 'ui'), else_='api')
    refused = sa.and_(r.reason.like('rate_limit:%'), r.status_code.between(400, 499))

    def count(condition: Any) -> Any:
        return sa.func.sum(sa.case((condition, 1), else_=0))

    def tokens(column: Any) -> Any:
        return sa.func.sum(sa.case((column > 0, column), else_=0))

    sums = [
        sa.func.count().label('requests'),
        tokens(r.prompt_tokens).label('prompt_tokens'),
        tokens(r.completion_tokens).label('completion_tokens'),
        tokens(r.cached_tokens).label('cached_tokens'),
        count(r.status_code >= 500).label('errors'),
        count(refused).label('refusals'),
        *(
            count(sa.and_(refused, r.reason == f'rate_limit:{reason}')).label(f'refused_{reason}')
            for reason in REASONS
        ),
    ]
    keys = [day.label('day'), r.department_id, r.user_id, r.api_key_id, via.label('via')]
    statement = (
        sa.select(*keys, *sums)
        .where(r.action == 'api.request')
        .group_by(day, r.department_id, r.user_id, r.api_key_id, via)
    )
    usage = sa.table(
        'usage_daily',
        sa.column('id', sa.Uuid()),
        sa.column('day', sa.Date()),
        sa.column('department_id', sa.Uuid()),
        sa.column('user_id', sa.Uuid()),
        sa.column('api_key_id', sa.Uuid()),
        sa.column('via', sa.String()),
        *(sa.column(name, sa.BigInteger()) for name in COUNTERS),
    )
    rows = []
    for row in bind.execute(statement).mappings():
        values = dict(row)
        values['day'] = _day(values['day'])
        values['id'] = _bucket_id(values)
        values.update({name: int(values[name] or 0) for name in COUNTERS})
        rows.append(values)
    if rows:
        bind.execute(sa.insert(usage), rows)


def _day(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value)[:10])


def _bucket_id(values: dict[str, Any]) -> uuid.UUID:
    ids = (values['department_id'], values['user_id'], values['api_key_id'])
    parts = [values['day'].isoformat(), *(str(v) if v else '' for v in ids), values['via']]
    return uuid.uuid5(BUCKET_NAMESPACE, '|'.join(parts))
