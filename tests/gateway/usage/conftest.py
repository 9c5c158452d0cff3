"""The audit tests' migrated databases (a Postgres clone and a SQLite copy per test), and the
traffic tests' real tiny worker, for the usage tests too."""

from tests.gateway.audit.conftest import (  # noqa: F401  (pytest finds fixtures by name)
    any_url,
    audit_template,
    postgres_url,
    sqlite_template,
    sqlite_url,
)
from tests.gateway.traffic.conftest import tiny_checkpoint, worker  # noqa: F401
