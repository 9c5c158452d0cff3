"""Run the Alembic revisions in ``migrations/`` against a database URL."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from gateway.db.engine import prepare_sqlite_file
from gateway.db.models.conversation import SEARCH_INDEXES, SEARCH_TABLE_PREFIXES
from gateway.db.trigram import TRIGRAM_INDEXES

# migrations/ sits beside the gateway package at the repository root.
REPO_ROOT = Path(__file__).resolve().parents[2]


def include_name(name: str | None, type_: str, _parents: object) -> bool:
    """What autogenerate compares (migrations/env.py): not the search indexes that a
    revision makes outside the models."""
    if type_ == "table":
        return not (name or "").startswith(SEARCH_TABLE_PREFIXES)
    return not (type_ == "index" and name in (*SEARCH_INDEXES, *TRIGRAM_INDEXES))


def alembic_config(database_url: str) -> Config:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database to ``revision`` from whatever revision it is at (or empty)."""
    prepare_sqlite_file(database_url)
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
