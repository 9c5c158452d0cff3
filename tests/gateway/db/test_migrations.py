"""The same revisions take an empty database to head and back down, on Postgres and SQLite."""

from __future__ import annotations

import uuid
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection

from gateway.db import migrate
from gateway.db.base import Base
from gateway.db.engine import create_engine
from gateway.db.models import __all__ as _models  # noqa: F401

EXPECTED_TABLES = {t.name for t in Base.metadata.sorted_tables}
# SQLite's full-text search: FTS5 tables (and the shadow tables FTS5 keeps for each) that
# migration 0004 creates on SQLite only; the models do not know them.
SQLITE_SEARCH_TABLES = ("conversation_messages_fts", "conversation_titles_fts")


def _tables(connection: Connection) -> set[str]:
    return set(sa.inspect(connection).get_table_names()) - {"alembic_version"}


def _model_tables(connection: Connection) -> set[str]:
    """The tables at head, less (and checking) SQLite's search tables."""
    names = _tables(connection)
    if connection.dialect.name == "sqlite":
        search = {n for n in names if n.startswith(SQLITE_SEARCH_TABLES)}
        assert set(SQLITE_SEARCH_TABLES) <= search
        names -= search
    return names


def _upgrade_check_downgrade(connection: Connection, url: str) -> None:
    config = migrate.alembic_config(url)
    config.attributes["connection"] = connection
    assert _tables(connection) == set()
    command.upgrade(config, "head")
    assert _model_tables(connection) == EXPECTED_TABLES
    # The migrated schema has the columns the models expect (nothing left out of the revision).
    inspector = sa.inspect(connection)
    for table in Base.metadata.sorted_tables:
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        assert columns == set(table.columns.keys()), table.name
    unique = {i["name"] for i in inspector.get_indexes("api_keys") if i["unique"]}
    assert "ix_api_keys_key_hash" in unique
    # Nothing for autogenerate to find: types, indexes and constraints match the models, and
    # the search objects made outside them are hidden from it (not proposed for dropping).
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": migrate.include_name}
    )
    assert compare_metadata(context, Base.metadata) == []
    command.downgrade(config, "base")
    assert _tables(connection) == set()


async def test_postgres_upgrade_to_head_and_back(database_url: str) -> None:
    schema = f"migrate_{uuid.uuid4().hex[:12]}"
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            await connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
            await connection.execute(sa.text(f'SET search_path TO "{schema}"'))
            await connection.run_sync(_upgrade_check_downgrade, database_url)
            await connection.commit()
            await connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
            await connection.commit()
    finally:
        await engine.dispose()


def test_sqlite_upgrade_to_head_and_back(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'nested' / 'enclave.db'}"
    migrate.upgrade(url)  # through env.py's own async engine, as `enclave migrate` does
    migrate.downgrade(url)
    sync_engine = sa.create_engine(f"sqlite:///{tmp_path / 'nested' / 'enclave.db'}")
    with sync_engine.connect() as connection:
        assert _tables(connection) == set()
        _upgrade_check_downgrade(connection, url)
    sync_engine.dispose()
