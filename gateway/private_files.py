"""The data directory and what the gateway writes there are its user's alone.

The SQLite database, the audit spool, the worker's log and the generated secrets hold
prompts, emails and keys: directories are created 0700 and files 0600, whatever the umask,
and a data directory left open to other users by an earlier version is closed at start.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import structlog

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600

log = structlog.get_logger("gateway")


def private_dir(path: Path) -> Path:
    """``path`` and any missing parents, created 0700 (existing ones are left as they are)."""
    missing: list[Path] = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            directory.mkdir(mode=PRIVATE_DIR)
    return path


def private_opener(path: str, flags: int) -> int:
    """For ``open(..., opener=private_opener)``: a file it creates is 0600."""
    return os.open(path, flags, PRIVATE_FILE)


def create_private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 unless it exists (before another library creates it)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))


def tighten_data_dir(data_dir: Path) -> None:
    """Close a data directory (and what is directly in it, and in its subdirectories) that
    other users can read; log each change. Symlinks and others' files are left alone."""
    if not data_dir.is_dir():
        return
    _tighten(data_dir, PRIVATE_DIR)
    for entry in data_dir.iterdir():
        if entry.is_symlink():
            continue
        if entry.is_dir():
            _tighten(entry, PRIVATE_DIR)
            for inner in entry.iterdir():
                if inner.is_file() and not inner.is_symlink():
                    _tighten(inner, PRIVATE_FILE)
        elif entry.is_file():
            _tighten(entry, PRIVATE_FILE)


def _tighten(path: Path, mode: int) -> None:
    info = path.lstat()
    current = stat.S_IMODE(info.st_mode)
    if current & 0o077 == 0 or info.st_uid != os.getuid():
        return
    os.chmod(path, current & ~0o077 | (mode & 0o700))
    log.warning(
        "tightened permissions: other users could read this",
        path=str(path),
        was=oct(current),
        now=oct(stat.S_IMODE(path.lstat().st_mode)),
    )
