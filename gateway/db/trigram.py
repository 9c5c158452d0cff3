"""The trigram indexes that serve the admin lists' ``q`` substring search on Postgres.

Migration 0006 makes them outside the models: they need the pg_trgm extension, which a
database may not allow (the revision then skips them), and SQLite has no equivalent.
migrations/env.py hides them from autogenerate, which would otherwise propose dropping them.
"""

from __future__ import annotations

TRIGRAM_INDEXES = (
    "ix_users_email_trgm",
    "ix_users_name_trgm",
    "ix_api_keys_name_trgm",
    "ix_api_keys_display_prefix_trgm",
)
