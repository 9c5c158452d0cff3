"""conversations and their messages, with full-text search

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 14:00:00.000000

Search indexes differ by database and are not in the models: on Postgres, GIN indexes on
``to_tsvector('simple', ...)`` of message content and conversation title (the queries in
gateway/domain/conversations/search.py use the same expressions); on SQLite, FTS5 tables
kept in step by triggers: an external-content one over conversation_messages (its rowid is
the message's INTEGER PRIMARY KEY) and one holding a copy of each title.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_SEARCH = [
    "CREATE VIRTUAL TABLE conversation_messages_fts USING fts5("
    "content, content='conversation_messages', content_rowid='id')",
    "CREATE TRIGGER conversation_messages_fts_insert AFTER INSERT ON conversation_messages "
    "BEGIN INSERT INTO conversation_messages_fts(rowid, content) VALUES (new.id, new.content); "
    "END",
    "CREATE TRIGGER conversation_messages_fts_delete AFTER DELETE ON conversation_messages "
    "BEGIN INSERT INTO conversation_messages_fts(conversation_messages_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER conversation_messages_fts_update AFTER UPDATE ON conversation_messages "
    "BEGIN INSERT INTO conversation_messages_fts(conversation_messages_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); "
    "INSERT INTO conversation_messages_fts(rowid, content) VALUES (new.id, new.content); END",
    # Conversations have UUID keys (no stable rowid), so the title index keeps its own copy.
    "CREATE VIRTUAL TABLE conversation_titles_fts USING fts5(title, conversation_id UNINDEXED)",
    "CREATE TRIGGER conversation_titles_fts_insert AFTER INSERT ON conversations "
    "BEGIN INSERT INTO conversation_titles_fts(title, conversation_id) "
    "VALUES (new.title, new.id); END",
    "CREATE TRIGGER conversation_titles_fts_delete AFTER DELETE ON conversations "
    "BEGIN DELETE FROM conversation_titles_fts WHERE conversation_id = old.id; END",
    "CREATE TRIGGER conversation_titles_fts_update AFTER UPDATE OF title ON conversations "
    "BEGIN UPDATE conversation_titles_fts SET title = new.title "
    "WHERE conversation_id = old.id; END",
]
POSTGRES_SEARCH = [
    "CREATE INDEX ix_conversation_messages_search ON conversation_messages "
    "USING gin (to_tsvector('simple', content))",
    "CREATE INDEX ix_conversations_title_search ON conversations "
    "USING gin (to_tsvector('simple', title))",
]


def upgrade() -> None:
    op.create_table(
        'conversations',
        sa.Column('user_id', sa.Uuid(), nullable=False),
        sa.Column('title', sa.String(length=200), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=False),
        sa.Column('system_prompt', sa.Text(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['user_id'],
            ['users.id'],
            name=op.f('fk_conversations_user_id_users'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_conversations')),
    )
    op.create_index(
        'ix_conversations_user_updated', 'conversations', ['user_id', 'updated_at', 'id']
    )
    op.create_table(
        'conversation_messages',
        sa.Column(
            'id',
            sa.BigInteger().with_variant(sa.Integer(), 'sqlite'),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column('conversation_id', sa.Uuid(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('role', sa.String(length=20), nullable=False),
        sa.Column('content', sa.Text(), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=True),
        sa.Column('prompt_tokens', sa.Integer(), nullable=True),
        sa.Column('completion_tokens', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "role IN ('user', 'assistant')", name=op.f('ck_conversation_messages_role')
        ),
        sa.ForeignKeyConstraint(
            ['conversation_id'],
            ['conversations.id'],
            name=op.f('fk_conversation_messages_conversation_id_conversations'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_conversation_messages')),
        sa.UniqueConstraint(
            'conversation_id', 'position', name=op.f('uq_conversation_messages_conversation_id')
        ),
    )
    search = SQLITE_SEARCH if op.get_bind().dialect.name == 'sqlite' else POSTGRES_SEARCH
    for statement in search:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        # Dropping a table drops its triggers; the FTS tables go by name.
        op.execute('DROP TABLE conversation_titles_fts')
        op.execute('DROP TABLE conversation_messages_fts')
    op.drop_table('conversation_messages')
    op.drop_index('ix_conversations_user_updated', table_name='conversations')
    op.drop_table('conversations')
