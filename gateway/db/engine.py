"""One async engine and session factory per process, built from settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from gateway.private_files import create_private_file, private_dir

# Seconds to wait for Postgres to accept a connection: a database that is down must fail
# fast (and the gateway fall back), not hold requests for asyncpg's default 60 s.
CONNECT_TIMEOUT_S = 5
SQLITE_PREFIX = "sqlite+aiosqlite:///"


def prepare_sqlite_file(url: str) -> None:
    """Create an SQLite database file 0600 in a 0700 directory before SQLite creates it
    with the umask's mode (0644 as a rule); its journals take the file's mode."""
    if not url.startswith(SQLITE_PREFIX):
        return
    path = Path(url[len(SQLITE_PREFIX) :].split("?", 1)[0])
    if path.name and str(path) != ":memory:":
        private_dir(path.parent)
        create_private_file(path)


def create_engine(url: str) -> AsyncEngine:
    if url.startswith("sqlite"):
        prepare_sqlite_file(url)
        engine = create_async_engine(url)
    else:
        engine = create_async_engine(
            url, pool_pre_ping=True, connect_args={"timeout": CONNECT_TIMEOUT_S}
        )
    if url.startswith("sqlite"):
        # SQLite leaves foreign keys off unless asked, per connection.
        @event.listens_for(engine.sync_engine, "connect")
        def _enable_foreign_keys(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

    return engine


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)
