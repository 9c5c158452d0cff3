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
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

# Idle connections kept per worker; more are opened when needed, closed when returned.
MAX_IDLE = 256
_READ_LIMIT = 1 << 20
_READ_SIZE = 65536
_MAX_LINE = 4096  # a chunk-size or trailer line longer than this is not from our worker


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
        self._idle: _IdleTimer | None = None
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._length = int(length) if length is not None and not self._chunked else None
        self._keep = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._length is not None
        )

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives (a chunked body: one piece per chunk)."""
        connection = self._connection
        if connection is None:
            raise UpstreamBroken("the response was already closed")
        self._idle = idle = _IdleTimer(self._timeout)
        try:
            if self._chunked:
                async for piece in self._dechunk(connection.reader, idle):
                    yield piece
            elif self._length is not None:
                left = self._length
                while left:
                    data = await idle.read(connection.reader, min(left, _READ_SIZE))
                    if not data:
                        raise UpstreamBroken("the worker closed the connection mid-body")
                    left -= len(data)
                    yield data
            else:  # neither length nor chunks: the body ends when the worker closes
                while data := await idle.read(connection.reader, _READ_SIZE):
                    yield data
        except OSError as exc:
            raise UpstreamBroken(f"the connection to the worker failed: {exc!r}") from None
        finally:
            idle.stop()
        self._complete = True

    async def _dechunk(
        self, reader: asyncio.StreamReader, idle: _IdleTimer
    ) -> AsyncIterator[bytes]:
        """Chunked transfer coding, parsed from whatever the socket has: one await per read,
        not two per chunk, since a worker's event usually arrives whole in one segment."""
        buffer = bytearray()
        pos = 0  # where the next chunk's size line starts
        while True:
            eol = buffer.find(b"\r\n", pos)
            if eol >= 0:
                size = _chunk_size(buffer[pos:eol])
                if size == 0:
                    pos = eol + 2
                    break
                end = eol + 2 + size
                if len(buffer) >= end + 2:
                    if buffer[end : end + 2] != b"\r\n":
                        raise UpstreamBroken("the worker's chunk framing is broken")
                    yield bytes(buffer[eol + 2 : end])
                    pos = end + 2
                    continue
            elif len(buffer) - pos > _MAX_LINE:
                raise UpstreamBroken("the worker's chunk size line is too long")
            del buffer[:pos]
            pos = 0
            buffer += await self._more(reader, idle)
        # Trailers (ignored) up to the empty line that ends the body.
        while (eol := buffer.find(b"\r\n", pos)) != pos:
            if eol > pos:
                pos = eol + 2
                continue
            if len(buffer) - pos > _MAX_LINE:
                raise UpstreamBroken("the worker's trailers are too long")
            del buffer[:pos]
            pos = 0
            buffer += await self._more(reader, idle)
        if len(buffer) > pos + 2:
            self._keep = False  # bytes after the body: not a connection to trust again

    @staticmethod
    async def _more(reader: asyncio.StreamReader, idle: _IdleTimer) -> bytes:
        data = await idle.read(reader, _READ_SIZE)
        if not data:
            raise UpstreamBroken("the worker's response broke off mid-body")
        return data

    def release(self) -> None:
        """Done with the response: a fully read one keeps its connection for the next call."""
        if self._idle is not None:
            self._idle.stop()
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._complete and self._keep:
            self._pool.give_back(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Drop the connection (mid-stream, the worker sees the client leave and cancels)."""
        if self._idle is not None:
            self._idle.stop()
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


def _chunk_size(line: bytearray) -> int:
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise UpstreamBroken(f"not a chunk size: {bytes(line[:40])!r}") from None


class _IdleTimer:
    """Times out a body whose next piece does not come within ``timeout`` seconds.

    One timer per response, moved on lazily, instead of one scheduled and cancelled around
    every read: a stream of hundreds of small events pays a clock read per event. Like
    ``asyncio.timeout`` it cancels the reading task and turns that into UpstreamTimeout; it
    only ever fires while that task waits in :meth:`read`.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a response body is read inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._since = self._loop.time()  # when the read now waiting began
        self._reading = False
        self._expired = False
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self._since + timeout, self._check
        )

    async def read(self, reader: asyncio.StreamReader, size: int) -> bytes:
        self._since = self._loop.time()
        self._reading = True
        try:
            return await reader.read(size)
        except asyncio.CancelledError:
            if self._expired and self._task.uncancel() <= self._cancelling:
                raise UpstreamTimeout(f"no data from the worker for {self.timeout:g} s") from None
            raise
        finally:
            self._reading = False

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        now = self._loop.time()
        due = self._since + self.timeout if self._reading else now + self.timeout
        if now < due:
            self._handle = self._loop.call_at(due, self._check)
            return
        self._handle = None
        self._expired = True
        self._task.cancel()


class _Stale(Exception):
    """A reused connection turned out closed before the worker read the request."""
