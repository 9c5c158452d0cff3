"""The proxy's HTTP/1.1 client against raw servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.domain.proxy.http1 import (
    ConnectFailed,
    Http1Pool,
    UpstreamBroken,
    UpstreamTimeout,
)
from tests.inference.server.conftest import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/x"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.startswith(b"content-length")
    )
    return await reader.readexactly(length)


def _chunked(*pieces: bytes) -> bytes:
    frames = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces)
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + frames + b"0\r\n\r\n"


@contextlib.asynccontextmanager
async def _pool() -> AsyncIterator[Http1Pool]:
    client = Http1Pool(connect_timeout=2, read_timeout=0.5)
    try:
        yield client
    finally:
        await client.close()


async def test_chunked_and_sized_bodies_on_one_kept_connection() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            if body == b"stream":
                writer.write(_chunked(b"data: a\n\n", b"data: b\n\n"))
            else:
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\nX-A: 1\r\n\r\n" + body)
            await writer.drain()

    server, url = await _serve(handler)
    async with server, _pool() as pool:
        sized = await pool.post(url, b"echo", {"content-type": "application/json"})
        assert (sized.status, sized.headers["x-a"], await sized.read()) == (201, "1", b"echo")
        sized.release()
        streamed = await pool.post(url, b"stream", {})
        assert [piece async for piece in streamed.chunks()] == [b"data: a\n\n", b"data: b\n\n"]
        streamed.release()
        again = await pool.post(url, b"more", {})
        assert await again.read() == b"more"
        again.release()
    assert connections == 1


async def test_a_connection_the_server_closed_while_idle_is_retried_fresh() -> None:
    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive promised, then closed: like a worker's idle timeout

    server, url = await _serve(answer_once)
    async with server, _pool() as pool:
        for _ in range(3):
            response = await pool.post(url, b"{}", {})
            assert await response.read() == b"ok"
            response.release()
            await asyncio.sleep(0.05)


async def test_failures_are_typed() -> None:
    async with _pool() as pool:
        with pytest.raises(ConnectFailed):
            await pool.post(f"http://127.0.0.1:{free_port()}/v1/x", b"{}", {})

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(1.5)

    async def breaks(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab")
        await writer.drain()
        writer.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    server, url = await _serve(silent)
    async with server, _pool() as pool:
        with pytest.raises(UpstreamTimeout):
            await pool.post(url, b"{}", {})
    server, url = await _serve(breaks)
    async with server, _pool() as pool:
        response = await pool.post(url, b"{}", {})
        with pytest.raises(UpstreamBroken):
            await response.read()
        response.release()
    server, url = await _serve(garbage)
    async with server, _pool() as pool:
        with pytest.raises(UpstreamBroken, match="not an HTTP response"):
            await pool.post(url, b"{}", {})


async def test_a_body_times_out_when_the_worker_goes_quiet_not_when_it_is_slow() -> None:
    async def steady_then_silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(8):  # 1.2 s in all, longer than the read timeout, but never quiet
            writer.write(f"2\r\n{i:2}\r\n".encode())
            await writer.drain()
            await asyncio.sleep(0.15)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n")
        await writer.drain()
        await asyncio.sleep(1.5)  # then nothing: a stalled stream

    server, url = await _serve(steady_then_silent)
    async with server, _pool() as pool:
        slow = await pool.post(url, b"{}", {})
        assert [piece async for piece in slow.chunks()] == [f"{i:2}".encode() for i in range(8)]
        slow.release()
        stalled = await pool.post(url, b"{}", {})
        pieces = []
        with pytest.raises(UpstreamTimeout):
            async for piece in stalled.chunks():
                pieces.append(piece)
        assert pieces == [b"ab"]
        stalled.close()


async def test_chunks_split_anywhere_across_reads_and_trailers() -> None:
    small = _chunked(b"data: one\n\n", b"data: two\n\n")[:-2] + b"x-trailer: 1\r\n\r\n"
    large = _chunked(b"x" * 70000, b"data: three\n\n")
    connections = 0

    async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for body, step in ((small, 1), (large, 4093)):  # byte by byte, then odd sizes
            await _read_request(reader)
            for start in range(0, len(body), step):
                writer.write(body[start : start + step])
                await writer.drain()
                await asyncio.sleep(0)

    server, url = await _serve(dribble)
    async with server, _pool() as pool:
        response = await pool.post(url, b"{}", {})
        assert [piece async for piece in response.chunks()] == [b"data: one\n\n", b"data: two\n\n"]
        response.release()
        response = await pool.post(url, b"{}", {})
        assert [piece async for piece in response.chunks()] == [b"x" * 70000, b"data: three\n\n"]
        response.release()
    assert connections == 1  # clean after the trailers: the connection was kept
