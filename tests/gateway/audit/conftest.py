"""Migrated databases for the audit tests: a fresh Postgres database per test (cloned from
one migrated template, which is much faster than migrating each) and a SQLite file."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.db import migrate


async def _admin_sql(url: str, statement: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(sa.text(statement))
    finally:
        await engine.dispose()


def _with_database(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def audit_template(database_url: str) -> Iterator[str]:
    name = f"enclave_audit_tpl_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin_sql(database_url, f'CREATE DATABASE "{name}"'))
    try:
        migrate.upgrade(_with_database(database_url, name))
        yield name
    finally:
        asyncio.run(_admin_sql(database_url, f'DROP DATABASE "{name}" WITH (FORCE)'))


@pytest.fixture
def postgres_url(database_url: str, audit_template: str) -> Iterator[str]:
    name = f"enclave_audit_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin_sql(database_url, f'CREATE DATABASE "{name}" TEMPLATE "{audit_template}"'))
    try:
        yield _with_database(database_url, name)
    finally:
        asyncio.run(_admin_sql(database_url, f'DROP DATABASE "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audit-template") / "audit.db"
    migrate.upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "audit.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgres"])
def any_url(request: pytest.FixtureRequest) -> str:
    """Each test that asks for it runs on both databases."""
    return str(request.getfixturevalue(f"{request.param}_url"))
