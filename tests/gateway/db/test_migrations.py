"""The same revisions take an empty database to head and back down, on Postgres and SQLite."""

from __future__ import annotations

import asyncio
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
from gateway.db.trigram import TRIGRAM_INDEXES
from tests.gateway.postgres import fresh_postgres

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


def _index_names(connection: Connection, *tables: str) -> set[str]:
    inspector = sa.inspect(connection)
    return {str(i["name"]) for table in tables for i in inspector.get_indexes(table)}


def _upgrade_check_downgrade(connection: Connection, url: str, trigram: bool = True) -> None:
    """Upgrade, compare with the models, downgrade; ``trigram``: whether Postgres should
    have got the pg_trgm search indexes (SQLite never does)."""
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
    indexes = _index_names(connection, "users", "api_keys")
    if trigram and connection.dialect.name == "postgresql":
        assert set(TRIGRAM_INDEXES) <= indexes
    else:
        assert indexes.isdisjoint(TRIGRAM_INDEXES)
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


async def _upgrade_as_unprivileged_role(database_url: str) -> None:
    """A role that may not create extensions (no CREATE on the database) owns the schema."""
    role = f"noext_{uuid.uuid4().hex[:12]}"
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            await connection.execute(sa.text(f'CREATE ROLE "{role}" NOLOGIN'))
            await connection.commit()
        try:
            async with engine.connect() as connection:
                await connection.execute(sa.text(f'CREATE SCHEMA "{role}" AUTHORIZATION "{role}"'))
                await connection.execute(sa.text(f'SET ROLE "{role}"'))
                await connection.execute(sa.text(f'SET search_path TO "{role}"'))
                await connection.run_sync(_upgrade_check_downgrade, database_url, False)
                await connection.rollback()
        finally:
            async with engine.connect() as connection:
                await connection.execute(sa.text(f'DROP OWNED BY "{role}" CASCADE'))
                await connection.execute(sa.text(f'DROP ROLE "{role}"'))
                await connection.commit()
    finally:
        await engine.dispose()


def test_postgres_upgrade_without_pg_trgm_skips_the_search_indexes(database_url: str) -> None:
    # A fresh database: pg_trgm is not installed there, and this role may not install it.
    with fresh_postgres(database_url) as url:
        asyncio.run(_upgrade_as_unprivileged_role(url))
