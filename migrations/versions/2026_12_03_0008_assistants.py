"""assistants and their versions; conversations name the assistant they were started with

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 18:30:00.000000

conversations and conversation_messages gain plain nullable columns (ALTER TABLE ADD
COLUMN on both databases: no table rebuild, so SQLite's FTS5 triggers on them stay).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'assistants',
        sa.Column('department_id', sa.Uuid(), nullable=False),
        sa.Column('slug', sa.String(length=100), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('is_default', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column('current_version', sa.Integer(), nullable=False),
        sa.Column('archived_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['department_id'],
            ['departments.id'],
            name=op.f('fk_assistants_department_id_departments'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_assistants')),
    )
    op.create_index(op.f('ix_assistants_department_id'), 'assistants', ['department_id'])
    op.create_index(op.f('ix_assistants_slug'), 'assistants', ['slug'], unique=True)
    op.create_table(
        'assistant_versions',
        sa.Column('assistant_id', sa.Uuid(), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('system_prompt', sa.Text(), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=True),
        sa.Column('sampling', sa.JSON(), nullable=True),
        sa.Column('response_template', sa.JSON(), nullable=True),
        sa.Column('prompt_tokens', sa.Integer(), nullable=True),
        sa.Column('created_by', sa.Uuid(), nullable=True),
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['assistant_id'],
            ['assistants.id'],
            name=op.f('fk_assistant_versions_assistant_id_assistants'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['created_by'],
            ['users.id'],
            name=op.f('fk_assistant_versions_created_by_users'),
            ondelete='SET NULL',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_assistant_versions')),
        sa.UniqueConstraint(
            'assistant_id', 'version', name=op.f('uq_assistant_versions_assistant_id')
        ),
    )
    op.add_column('conversations', sa.Column('assistant_id', sa.Uuid(), nullable=True))
    op.add_column('conversations', sa.Column('assistant_version', sa.Integer(), nullable=True))
    op.add_column(
        'conversation_messages', sa.Column('assistant_version', sa.Integer(), nullable=True)
    )


def downgrade() -> None:
    # DROP COLUMN: SQLite 3.35+ does it in place too, keeping the FTS5 triggers.
    op.drop_column('conversation_messages', 'assistant_version')
    op.drop_column('conversations', 'assistant_version')
    op.drop_column('conversations', 'assistant_id')
    op.drop_table('assistant_versions')
    op.drop_index(op.f('ix_assistants_slug'), table_name='assistants')
    op.drop_index(op.f('ix_assistants_department_id'), table_name='assistants')
    op.drop_table('assistants')
