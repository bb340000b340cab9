"""The stream loop's HTTP/1.1: POSTs on keep-alive connections of its own, one per stream in flight, each
response parsed by httptools (llhttp, Node's parser, which uvicorn uses too) straight from the socket's
reads. What a read costs is one perf_counter stamp, one parse and one hand-off of the body bytes it
held: no stream reader, no iterator, no trace hooks, and no task woken per read, as aiohttp's had: its
loop spent 6.1 us of CPU a chunk where this one spends 3.3-3.8 (256 streams on 2 cores).

A Post is one request: its stamps (send start, connected, request sent), handed to its sink with the
stamp of the read that completed the response's headers, then (request_id, stamp, body bytes) per read
that held body bytes, as openai_loop describes; it ends with None or a failure's message. A
connection whose response ended whole with keep-alive goes back to the pool; one that a server closed
while idle is dropped there, and a reused one that closes before any byte of its response is retried
once on a new connection (the server closed it as the request went out)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from time import perf_counter
from urllib.parse import urlsplit

import httptools

from llmbench.backends.openai_stream import error_message

Sink = Callable[[tuple], None]


class Target:
    """The endpoint's address and the bytes of its request head, made once for every request."""

    def __init__(self, url: str, headers: dict[str, str]):
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = ssl.create_default_context() if parts.scheme == "https" else None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = parts.port is None
        host = parts.hostname if default_port else f"{parts.hostname}:{self.port}"
        if ":" in (parts.hostname or ""):  # an IPv6 literal keeps its brackets in the Host header
            host = f"[{parts.hostname}]" + ("" if default_port else f":{self.port}")
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json", "Accept: */*"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    def request(self, body: bytes) -> bytes:
        return b"%s%d\r\n\r\n%s" % (self._head, len(body), body)


class Post:
    """One request's exchange: filled in by the connection that carries it."""

    __slots__ = (
        "request_id", "sink", "phases", "status", "error_body", "last_read", "reads", "outcome", "connection"
    )  # fmt: skip

    def __init__(self, request_id: str, sink: Sink, send_start: float):
        self.request_id = request_id
        self.sink = sink
        self.phases: list[float | None] = [send_start, None, None]  # send start, connected, request sent
        self.status = 0
        self.error_body = bytearray()  # the body of a response with an error status
        self.last_read = 0.0
        self.reads = 0  # reads of this response so far
        self.outcome: asyncio.Future | None = None  # None once it ended whole, else a failure's message
        self.connection: Connection | None = None  # the one carrying it

    def cancel(self) -> None:
        """Read no more of it, at once: its connection closes (reads already in this turn are dropped)."""
        if self.connection is not None:
            self.connection.close_now()


class HttpStreams:
    """The connections of one event loop to one endpoint, and the requests they carry."""

    def __init__(self, url: str, headers: dict[str, str], connect_s: float, stall_s: float | None):
        self._target = Target(url, headers)
        self._connect_s = connect_s
        self._stall_s = stall_s
        self._idle: list[Connection] = []
        self._opening: set[asyncio.Task] = set()  # connections prepare() is opening
        self._open: set[Connection] = set()
        self._address: tuple | None = None  # resolved once: a burst of connections needs no lookups

    async def resolve(self) -> None:
        """Look the host up, once, before any stream (a failure waits for the first connection)."""
        target = self._target
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except OSError:
            return  # each connection tries again, and fails with the reason
        self._address = found[0][4][:2]

    async def post(self, body: bytes, post: Post) -> str | None:
        """Send `body` and read its response into `post`; None once it ended whole, else why it failed
        (a line for the request's error)."""
        data = self._target.request(body)
        for retry in (False, True):
            try:
                connection, reused = await self._connection()
            except TimeoutError:
                return f"connection error: not connected within {self._connect_s:g} s"
            except OSError as e:
                return f"connection error: {type(e).__name__}: {e}"
            post.phases[1] = perf_counter()
            try:
                outcome = await connection.exchange(data, post)
            except asyncio.CancelledError:  # its response is not read to the end: its connection goes
                connection.close_now()
                raise
            if outcome is _UNANSWERED and reused and not retry:
                continue
            if outcome is _UNANSWERED:
                return "connection error: the server closed the connection without answering"
            if connection.reusable():  # its response ended whole, an error status's too
                self._idle.append(connection)
            return outcome
        raise AssertionError("unreachable")

    def prepare(self, count: int) -> None:
        """Open connections ahead, in the background, until `count` are idle or on their way: requests
        handed before their due time then find one ready, and a burst due at once only writes."""
        loop = asyncio.get_running_loop()
        while len(self._idle) + len(self._opening) < count:
            task = loop.create_task(self._open_idle())
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    def close(self) -> None:
        for task in self._opening:
            task.cancel()
        for connection in self._open:
            connection.transport.close()
        self._open.clear()
        self._idle.clear()

    async def _connection(self) -> tuple[Connection, bool]:
        """An idle connection (reused: True), else a new one."""
        while self._idle:
            connection = self._idle.pop()
            if not connection.lost:
                return connection, True
        return await self._new_connection(), False

    async def _open_idle(self) -> None:
        try:
            connection = await self._new_connection()
        except (OSError, TimeoutError):
            return  # the request that needed it opens its own, and fails with the reason
        self._idle.append(connection)

    async def _new_connection(self) -> Connection:
        loop = asyncio.get_running_loop()
        target = self._target
        host, port = self._address or (target.host, target.port)
        async with asyncio.timeout(self._connect_s):
            _, connection = await loop.create_connection(
                lambda: Connection(self, self._stall_s),
                host,
                port,
                ssl=target.tls,
                server_hostname=target.host if target.tls else None,
            )
        self._open.add(connection)
        return connection

    def forget(self, connection: Connection) -> None:
        self._open.discard(connection)


_UNANSWERED = "unanswered"  # a connection lost before any byte of its response: worth one retry
_FRAMING = (b"content-length", b"transfer-encoding")


def _failure(post: Post) -> str | None:
    """None for a response that ended whole with a success status, else its error line."""
    if post.status < 400:
        return None
    return f"HTTP {post.status}: {error_message(post.error_body.decode(errors='replace'))}"


class Connection(asyncio.Protocol):
    """One keep-alive connection; httptools calls the on_* methods while it parses a read."""

    def __init__(self, pool: HttpStreams, stall_s: float | None):
        self._pool = pool
        self._stall_s = stall_s
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self._post: Post | None = None
        self._stamp = 0.0
        self._body: list[bytes] = []  # the body bytes of the read being parsed
        self._ended = False  # the response being parsed is complete
        self._framed = False  # it has a content-length or is chunked (else its body ends at EOF)
        self._keep_alive = False  # the response that ended last lets the connection carry another
        self._stall_timer: asyncio.TimerHandle | None = None

    def exchange(self, data: bytes, post: Post) -> asyncio.Future:
        """Write the request; the future gets None, a failure's message, or _UNANSWERED."""
        post.outcome = asyncio.get_running_loop().create_future()
        post.connection = self
        post.status, post.reads = 0, 0
        post.error_body.clear()
        self._post, self._ended, self._framed, self._keep_alive = post, False, False, False
        self.transport.write(data)
        post.phases[2] = post.last_read = perf_counter()
        if self._stall_s is not None:
            self._stall_timer = asyncio.get_running_loop().call_at(
                loop_time(post.last_read + self._stall_s), self._check_stall
            )
        return post.outcome

    def reusable(self) -> bool:
        """Its last response ended whole, and the server keeps the connection open for another."""
        return not self.lost and self._keep_alive and not self.transport.is_closing()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        post = self._post
        if post is None:  # bytes on an idle connection: the server is out of step, drop the connection
            self.transport.close()
            return
        self._stamp = post.last_read = perf_counter()
        post.reads += 1
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._finish(f"connection error: malformed HTTP response ({type(e).__name__}: {e})")
            self.transport.close()
            return
        if self._body:
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._body.clear()
            if post.status < 400:
                post.sink((post.request_id, self._stamp, body))
            else:
                post.error_body += body
        if self._ended:
            self._finish(_failure(post))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._pool.forget(self)
        post = self._post
        if post is None:
            return
        if post.reads == 0:
            self._finish(_UNANSWERED)
        elif post.status and not self._framed:  # a body without length or chunks ends as its connection
            self._finish(_failure(post))
        else:
            self._finish("connection error: the server closed the connection before the response ended")

    # httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in _FRAMING:
            self._framed = True

    def on_headers_complete(self) -> None:
        post = self._post
        post.status = self._parser.get_status_code()
        post.sink((post.request_id, self._stamp, post.phases))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._ended = True
        self._keep_alive = self._parser.should_keep_alive()  # (the parser forgets it once past the end)

    def close_now(self) -> None:
        self._post = None
        self._body.clear()
        self._cancel_stall()
        if self.transport is not None:
            self.transport.close()

    def _finish(self, outcome: str | None) -> None:
        post, self._post = self._post, None
        self._cancel_stall()
        if post is not None and not post.outcome.done():
            post.outcome.set_result(outcome)

    def _check_stall(self) -> None:
        post = self._post
        if post is None:
            return
        due = post.last_read + self._stall_s
        if perf_counter() < due:  # read since: wait for the rest of the window from the last read
            self._stall_timer = asyncio.get_running_loop().call_at(loop_time(due), self._check_stall)
            return
        self._stall_timer = None
        self._finish(f"stream stalled: no data within request_timeout_s={self._stall_s:g}")
        self.transport.close()

    def _cancel_stall(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None


def loop_time(when: float) -> float:
    """A perf_counter time on the running loop's clock (both monotonic, maybe not the same origin)."""
    return asyncio.get_running_loop().time() + (when - perf_counter())
