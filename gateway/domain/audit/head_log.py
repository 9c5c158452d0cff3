"""A second copy of the chain's head, outside the database: one line per committed batch.

The HMAC stops anyone without the secret from editing or inventing records, but not from
cutting records off the end and moving the head back to an earlier one: every remaining
record still verifies. The head log catches that. After each batch commits, the writer
appends ``<seq> <hash> <time>`` here; ``enclave audit verify`` reads the highest seq ever
recorded and refuses a database whose head is behind it, or whose record at that seq has
another hash.

Several gateway processes (on one host or several) may append to one file: each line is one
``write`` on an ``O_APPEND`` descriptor under an exclusive ``flock``, so lines never
interleave; they may land out of seq order (two processes racing after their commits),
which is why the reader takes the highest seq rather than the last line. A line is written
only after its batch committed, so a recorded head is always one the database once had.

It is worth most where the database's administrator cannot rewrite it: another host's
mount, a WORM bucket through a sidecar (``ENCLAVE_AUDIT_HEAD_FILE``). Blocking file I/O:
async callers run these in a thread.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RecordedHead:
    seq: int
    hash: str
    at: str


@dataclass(frozen=True, slots=True)
class HeadLog:
    path: Path

    def record(self, seq: int, head_hash: str) -> None:
        line = f"{seq} {head_hash} {datetime.now(UTC).isoformat()}\n".encode("ascii")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line)
        finally:
            os.close(fd)  # releases the lock

    def highest(self) -> RecordedHead | None:
        """The recorded head with the highest seq, or None when nothing was recorded yet."""
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return None
        best: RecordedHead | None = None
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            for raw in handle:
                head = _parse(raw)
                if head is not None and (best is None or head.seq > best.seq):
                    best = head
        return best


def _parse(raw: bytes) -> RecordedHead | None:
    # A line torn by a crash mid-write (no newline, too few fields) is not a head.
    parts = raw.decode("ascii", "replace").split()
    if not raw.endswith(b"\n") or len(parts) != 3 or not parts[0].isdigit():
        return None
    if len(parts[1]) != 64:
        return None
    return RecordedHead(int(parts[0]), parts[1], parts[2])
