"""A free TCP port on loopback: for a worker the gateway starts beside another (a weight
swap) and for the benchmarks' processes."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
