"""keyed audit chain, admin records and the caller's request id

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 12:50:00.000000

Records already in the chain were hashed with plain SHA-256 over the columns they had then;
`audit_chain.keyed_from_seq` marks the first seq that is HMAC-keyed (the head + 1 at the
time of this upgrade), so verification checks each part the way it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('request_records', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('action', sa.String(length=100), server_default='api.request', nullable=False)
        )
        batch_op.add_column(
            sa.Column('target_type', sa.String(length=50), server_default='', nullable=False)
        )
        batch_op.add_column(
            sa.Column('target_id', sa.String(length=100), server_default='', nullable=False)
        )
        batch_op.add_column(sa.Column('details', sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column('client_request_id', sa.String(length=128), server_default='', nullable=False)
        )
        batch_op.create_index(
            'ix_request_records_action_created', ['action', 'created_at'], unique=False
        )

    with op.batch_alter_table('audit_chain', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('keyed_from_seq', sa.BigInteger(), server_default='1', nullable=False)
        )
    # Data step: everything written so far stays verifiable as plain SHA-256.
    op.execute('UPDATE audit_chain SET keyed_from_seq = head_seq + 1')


def downgrade() -> None:
    with op.batch_alter_table('audit_chain', schema=None) as batch_op:
        batch_op.drop_column('keyed_from_seq')

    with op.batch_alter_table('request_records', schema=None) as batch_op:
        batch_op.drop_index('ix_request_records_action_created')
        batch_op.drop_column('client_request_id')
        batch_op.drop_column('details')
        batch_op.drop_column('target_id')
        batch_op.drop_column('target_type')
        batch_op.drop_column('action')
