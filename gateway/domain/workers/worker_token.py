"""The internal token between the gateway and its embedded worker.

Configured (``ENCLAVE_WORKER_TOKEN``) or, like the server secret, generated on first start
and kept in ``data_dir`` (mode 0600): it stays the same across restarts, and an admin
who has to call the worker by hand finds it there.
"""

from __future__ import annotations

from gateway.secret_store import _load_or_create
from gateway.settings import Settings

TOKEN_FILE = "worker_token"


def embedded_worker_token(settings: Settings) -> str:
    if settings.worker_token:
        return settings.worker_token
    return _load_or_create(settings.data_dir / TOKEN_FILE)
