"""A small HTTP/1.1 client for the one thing the proxy does: POST JSON to a worker.

Keep-alive connections per worker, the request written in one piece, and the answer read
as it comes (content-length or chunked). It does a fraction of a general client's work
per call: against the benchmark's fake worker, the time from sending a request to its
response headers went from 1.1 ms with aiohttp (7 ms with httpx) to 0.3 ms, and that is
latency every API call pays. Workers are ours and speak plain HTTP/1.1; anything this
client does not understand is an error, not a guess.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar
from urllib.parse import urlsplit

# Idle connections kept per worker; more are opened when needed, closed when returned.
MAX_IDLE = 256
_READ_LIMIT = 1 << 20
T = TypeVar("T")


class UpstreamError(Exception):
    """A call to a worker failed."""


class ConnectFailed(UpstreamError):
    """The worker could not be reached: nothing was sent, so another may be tried."""


class UpstreamTimeout(UpstreamError):
    """The worker did not answer (or send the next piece) in time."""


class UpstreamBroken(UpstreamError):
    """The connection dropped or the worker sent something that is not HTTP/1.1."""


class _Connection:
    def __init__(self, key: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.key = key
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        self.writer.transport.abort()


class Response:
    def __init__(
        self,
        pool: Http1Pool,
        connection: _Connection,
        status: int,
        headers: dict[str, str],
        read_timeout: float,
    ) -> None:
        self.status = status
        self.headers = headers
        self._pool = pool
        self._connection: _Connection | None = connection
        self._timeout = read_timeout
        self._complete = False
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._length = int(length) if length is not None and not self._chunked else None
        self._keep = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._length is not None
        )

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives."""
        connection = self._connection
        if connection is None:
            raise UpstreamBroken("the response was already closed")
        reader = connection.reader
        try:
            if self._chunked:
                while True:
                    line = await self._within(reader.readuntil(b"\r\n"))
                    size = int(line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while await self._within(reader.readuntil(b"\r\n")) != b"\r\n":
                            pass  # trailers, ignored
                        break
                    data = await self._within(reader.readexactly(size + 2))
                    yield data[:-2]
            elif self._length is not None:
                left = self._length
                while left:
                    data = await self._within(reader.read(min(left, 65536)))
                    if not data:
                        raise UpstreamBroken("the worker closed the connection mid-body")
                    left -= len(data)
                    yield data
            else:  # neither length nor chunks: the body ends when the worker closes
                while data := await self._within(reader.read(65536)):
                    yield data
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise UpstreamBroken(f"the worker's response broke off: {exc!r}") from None
        except OSError as exc:
            raise UpstreamBroken(f"the connection to the worker failed: {exc!r}") from None
        self._complete = True

    async def _within(self, step: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout):
                return await step
        except TimeoutError:
            raise UpstreamTimeout(f"no data from the worker for {self._timeout:g} s") from None

    def release(self) -> None:
        """Done with the response: a fully read one keeps its connection for the next call."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._complete and self._keep:
            self._pool.give_back(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Drop the connection (mid-stream, the worker sees the client leave and cancels)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class Http1Pool:
    def __init__(self, *, connect_timeout: float, read_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: defaultdict[str, deque[_Connection]] = defaultdict(deque)
        self._ssl: ssl.SSLContext | None = None

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Response:
        parts = urlsplit(url)
        key = f"{parts.scheme}://{parts.netloc}"
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {path} HTTP/1.1", f"host: {parts.netloc}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        connection = self._idle_connection(key)
        if connection is not None:
            try:
                return await self._exchange(connection, request)
            except _Stale:
                pass  # the worker closed it while idle; it never saw this request
        connection = await self._connect(key, parts.scheme, parts.hostname, parts.port)
        try:
            return await self._exchange(connection, request)
        except _Stale as exc:
            raise UpstreamBroken("the worker closed the connection without answering") from exc

    def give_back(self, connection: _Connection) -> None:
        idle = self._idle[connection.key]
        if len(idle) >= MAX_IDLE or connection.reader.at_eof():
            connection.close()
            return
        connection.reused = True
        idle.append(connection)

    async def close(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()

    def _idle_connection(self, key: str) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if not connection.reader.at_eof() and not connection.writer.is_closing():
                return connection
            connection.close()
        return None

    async def _connect(
        self, key: str, scheme: str, host: str | None, port: int | None
    ) -> _Connection:
        secure = scheme == "https"
        if secure and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    host, port or (443 if secure else 80), ssl=self._ssl if secure else None,
                    limit=_READ_LIMIT,
                )  # fmt: skip
        except TimeoutError:
            raise ConnectFailed(f"{key} did not accept a connection in time") from None
        except OSError as exc:
            raise ConnectFailed(f"{key} refused the connection: {exc.strerror or exc}") from None
        return _Connection(key, reader, writer)

    async def _exchange(self, connection: _Connection, request: bytes) -> Response:
        reader = connection.reader
        try:
            connection.writer.write(request)
            await connection.writer.drain()
            async with asyncio.timeout(self.read_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            connection.close()
            raise UpstreamTimeout(
                f"no answer from the worker for {self.read_timeout:g} s"
            ) from None
        except (asyncio.IncompleteReadError, OSError) as exc:
            connection.close()
            if connection.reused and not getattr(exc, "partial", b""):
                raise _Stale from exc
            raise UpstreamBroken(f"the connection to the worker failed: {exc!r}") from None
        except asyncio.LimitOverrunError:
            connection.close()
            raise UpstreamBroken("the worker's response headers are too large") from None
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            connection.close()
            raise UpstreamBroken(f"not an HTTP response: {status_line[:80]!r}") from None
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return Response(self, connection, status, headers, self.read_timeout)


class _Stale(Exception):
    """A reused connection turned out closed before the worker read the request."""
