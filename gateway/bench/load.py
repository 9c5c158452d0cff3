"""A small HTTP/1.1 load generator: keep-alive connections, each sending requests in turn.

Lighter than an HTTP client library, so on a small machine the measurement is not the
client's own overhead. It reads content-length and chunked bodies, which is all the
gateway and the fake worker send.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)  # seconds, request to last byte
    first_bytes: list[float] = field(default_factory=list)  # seconds, request to first event
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed: float = 0.0


async def run_load(
    host: str, port: int, request: bytes, *, concurrency: int, total: int, stagger: float = 0.0
) -> LoadResult:
    """``concurrency`` connections send ``total`` requests between them. With ``stagger``,
    connection i starts ``stagger * i / concurrency`` seconds late, so that streams of about
    that length are spread out in time, as users' are, instead of starting in lockstep."""
    result = LoadResult()
    remaining = [total]

    async def connection(i: int) -> None:
        await asyncio.sleep(stagger * i / concurrency)
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while remaining[0] > 0:
                remaining[0] -= 1
                started = time.perf_counter()
                writer.write(request)
                await writer.drain()
                status, first = await _read_response(reader, started)
                result.latencies.append(time.perf_counter() - started)
                result.first_bytes.append(first)
                result.statuses[status] = result.statuses.get(status, 0) + 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection(i) for i in range(concurrency)))
    result.elapsed = time.perf_counter() - started
    return result


def http_request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "host: 127.0.0.1",
        "content-type: application/json",
        f"content-length: {len(body)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader, started: float) -> tuple[int, float]:
    head = await reader.readuntil(b"\r\n\r\n")
    first = time.perf_counter() - started
    status = int(head.split(b" ", 2)[1])
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        chunk = 0
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if chunk == 0:  # the first event of a stream: what a user waits for
                first = time.perf_counter() - started
            chunk += 1
            if size == 0:
                break
    else:
        marker = lowered.find(b"content-length:")
        length = int(lowered[marker + 15 : lowered.find(b"\r\n", marker)]) if marker >= 0 else 0
        await reader.readexactly(length)
    return status, first
