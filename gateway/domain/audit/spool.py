"""Where audit entries wait while the database is unreachable: append-only JSON lines.

Each writer appends to a file of its own (``<time>-<pid>-<random>.jsonl``) and holds an
exclusive ``flock`` on it while it lives, so that two gateway processes sharing a data
directory never replay each other's live spool; a file whose writer died is unlocked and
gets adopted by the next writer that looks. Files are replayed oldest first and removed
only after their records are committed (see ``store.append(skip_recorded=True)`` for why
a crash in between writes nothing twice).

Every method here does blocking file I/O; the writer calls them in a thread.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from pathlib import Path
from typing import IO

import structlog

from gateway.domain.audit.entry import AuditEntry
from gateway.private_files import private_dir, private_opener

log = structlog.get_logger("gateway.audit")
SUFFIX = ".jsonl"
# A new file every so many records: a replay reads one file at a time into memory.
RECORDS_PER_FILE = 10_000
REJECTED = ".rejected"


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._own: Path | None = None
        # Every file this writer holds the lock of (its own and adopted ones), open.
        self._held: dict[Path, IO[str]] = {}
        self._counts: dict[Path, int] = {}
        self._unreadable: dict[Path, list[str]] = {}
        # Kept apart from _counts: metrics read it from the event loop while a thread works.
        self._total = 0

    @property
    def count(self) -> int:
        """Records in the files this writer holds."""
        return self._total

    def append(self, entries: list[AuditEntry]) -> None:
        """Write ``entries`` as lines and fsync; on failure the file is cut back to before."""
        path, handle = self._own_file()
        start = handle.tell()
        try:
            handle.write("".join(entry.to_json() + "\n" for entry in entries))
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            handle.truncate(start)
            handle.seek(start)
            raise
        self._counts[path] += len(entries)
        self._total += len(entries)

    def adopt(self) -> None:
        """Take over files no live writer holds (left by a crash or an earlier run)."""
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            if path in self._held:
                continue
            handle = path.open("r+", encoding="utf-8")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()  # a live writer's own file
                continue
            self._held[path] = handle
            self._counts[path] = sum(1 for _ in handle)
            self._total += self._counts[path]

    def files(self) -> list[Path]:
        """The held files, oldest first (names start with the time they were made)."""
        return sorted(self._held)

    def read(self, path: Path) -> list[AuditEntry]:
        handle = self._held[path]
        handle.seek(0)
        lines = handle.read().split("\n")
        if path == self._own:
            handle.seek(0, os.SEEK_END)
        entries, unreadable = [], []
        for number, line in enumerate(lines, 1):
            if not line:
                continue
            try:
                entries.append(AuditEntry.from_json(line))
            except (ValueError, TypeError, KeyError) as exc:
                # A crash in the middle of a write leaves a torn last line; anything else is
                # damage from outside. Either way the line is kept beside, never dropped.
                log.error(
                    "unreadable audit spool line", path=str(path), line=number, error=str(exc)
                )
                unreadable.append(line + "\n")
        self._unreadable[path] = unreadable
        return entries

    def remove(self, path: Path) -> None:
        """Its records are in the database: delete the file (the lock goes with it)."""
        handle = self._held.pop(path)
        self._total -= self._counts.pop(path)
        unreadable = self._unreadable.pop(path, [])
        if unreadable:
            with open(
                path.with_suffix(REJECTED), "a", encoding="utf-8", opener=private_opener
            ) as rejected:
                rejected.writelines(unreadable)
        path.unlink()
        handle.close()
        if path == self._own:
            self._own = None

    def close(self) -> None:
        """Release the locks; what is still spooled stays on disk for the next start."""
        for handle in self._held.values():
            handle.close()
        self._held.clear()
        self._counts.clear()
        self._total = 0
        self._own = None

    def _own_file(self) -> tuple[Path, IO[str]]:
        if self._own is None or self._counts[self._own] >= RECORDS_PER_FILE:
            private_dir(self.directory)  # records hold emails, and bodies where kept
            name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
            path = self.directory / name
            handle = open(path, "a+", encoding="utf-8", opener=private_opener)  # noqa: SIM115
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._own, self._held[path], self._counts[path] = path, handle, 0
        return self._own, self._held[self._own]
