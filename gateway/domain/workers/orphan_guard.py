"""``python orphan_guard.py PARENT_PID PROGRAM ARGS...`` (standard library only)

Runs PROGRAM in its place (exec) after asking Linux to send it SIGTERM when its parent
dies. Without it, a gateway killed with SIGKILL (or by the OOM killer) leaves its worker
running: it keeps the port, so the next gateway's worker cannot start, and it keeps the
GPU memory. The death signal survives exec; SIGTERM lets the worker drain and exit cleanly.
Elsewhere than Linux it only execs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: orphan_guard PARENT_PID PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    parent, program = int(argv[0]), list(argv[1:])
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    if os.getppid() != parent:
        return 1  # the parent died before the death signal was armed: nobody to serve
    os.execv(program[0], program)
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
