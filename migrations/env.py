"""Alembic environment: async engine, URL passed in by gateway.db.migrate (or -x url=...)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gateway.db.base import Base
from gateway.db.engine import create_engine
from gateway.db.migrate import include_name
from gateway.db.models import __all__ as _all_models  # noqa: F401  (registers the tables)

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("database_url") or context.get_x_argument(as_dictionary=True).get(
        "url"
    )
    if not url:
        raise ValueError("no database URL: run `enclave migrate` or pass -x url=...")
    return str(url)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async())
