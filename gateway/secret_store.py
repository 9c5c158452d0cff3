"""The server secret: configured in production, generated once and kept in data_dir otherwise."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from gateway.private_files import private_dir
from gateway.settings import Settings, SettingsError, env_name

SECRET_FILE = "secret_key"


def resolve_secret_key(settings: Settings) -> str:
    if settings.secret_key:
        return settings.secret_key
    if settings.mode == "production":
        raise SettingsError(f"{env_name('secret_key')} is required in production mode")
    return _load_or_create(settings.data_dir / SECRET_FILE)


def _load_or_create(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    private_dir(path.parent)
    value = secrets.token_urlsafe(48)
    # O_EXCL: two processes starting together cannot both write different secrets.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value
