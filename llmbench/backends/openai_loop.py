"""The streams' event loop: one task a request, its POST on a keep-alive connection of the loop's
(http_stream.py), and per read of a response only what timing needs, a perf_counter stamp and the
bytes, handed to a sink. Parsing, counting and building
outputs happen elsewhere (the backend's poll, on the runner's thread), so a read is stamped without
waiting behind another stream's JSON.

perf_counter is CLOCK_MONOTONIC on Linux, one clock for every process of the host: a worker process's
stamps compare with the runner's submit times as they are.

A loop given a limit keeps that many streams in flight and queues the rest: a request it is handed
ahead starts the moment a stream ends, in the same turn of the loop, and its submit time (when it was
meant to start: its due time, or when the slot it took opened, the later) is stamped there too. A
closed loop's next request then never waits on another thread (the runner's, behind the GIL on a busy
host), as a bare client's, which starts its next request in the task that ended the last, never does.

What reaches the sink, in order per request: (request_id, send start, submit time) when the loop begins
it, (request_id, stamp, [send start, connected, request sent]) once the response's headers are in (the
stamp), then (request_id, stamp, bytes) for each read of the
body, then (request_id, stamp, None) at its end, or (request_id, stamp, message) when it fails
(connection error, HTTP error status, stall past workload.request_timeout_s). A LoopMonitor
(loop_monitor.py) keeps the loop's lag and CPU use beside."""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

from llmbench.backends.http_stream import HttpStreams, Post, loop_time
from llmbench.backends.loop_monitor import LoopMonitor

logger = logging.getLogger(__name__)

OPEN_FILES = 65536  # the soft limit raised to this (or the hard limit) for one socket per stream

Sink = Callable[[tuple], None]


@dataclass(frozen=True)
class StreamSettings:
    """Where and how to post: plain data, so a worker process can be given it."""

    url: str  # the endpoint's full URL
    headers: dict[str, str]
    connect_s: float
    stall_s: float | None  # no data this long fails a stream (None: wait forever)
    limit: int | None = None  # the most streams in flight; more wait in the loop's queue (None: no limit)


class StreamLoop:
    """The streams of one event loop; every method but open() and close() runs on that loop."""

    def __init__(self, settings: StreamSettings, sink: Sink):
        self._settings = settings
        self._sink = sink
        self._limit = settings.limit
        self._tasks: dict[str, asyncio.Task] = {}  # in flight: started, not yet ended
        self._posts: dict[str, Post] = {}  # the requests of those tasks that have begun
        self._waiting: deque[tuple[str, bytes, float]] = deque()  # (id, body, due) for a free slot
        self._ahead: dict[float, list[tuple[str, bytes, float]]] = {}  # handed before their due time
        self._ahead_count = 0  # the requests in _ahead
        self._slot_opened = -math.inf  # when a full window last opened a slot
        self._http: HttpStreams | None = None
        self.monitor = LoopMonitor()

    async def open(self) -> None:
        raise_open_file_limit()
        s = self._settings
        self._http = HttpStreams(s.url, s.headers, s.connect_s, s.stall_s)
        await self._http.resolve()
        self.monitor.open()

    def start(self, request_id: str, body: bytes, due: float) -> None:
        """Stream `body` from `due` (perf_counter seconds), once a slot is free. A request handed ahead
        of its due time waits for it here, with every other due then: one timer starts them all."""
        if due > perf_counter():
            batch = self._ahead.get(due)
            if batch is None:
                batch = self._ahead[due] = []
                asyncio.get_running_loop().call_at(loop_time(due), self._due, due)
            batch.append((request_id, body, due))
            self._ahead_count += 1
            free = self._ahead_count
            if self._limit is not None:
                free = min(free, self._limit - len(self._tasks))
            self._http.prepare(free)  # their connections, meanwhile
            return
        self._waiting.append((request_id, body, due))
        self._admit()

    def _due(self, due: float) -> None:
        early = due - perf_counter()
        if early > 0:  # the loop's timers round to whole milliseconds
            asyncio.get_running_loop().call_later(early, self._due, due)
            return
        batch = self._ahead.pop(due, [])
        self._ahead_count -= len(batch)
        self._waiting.extend(batch)
        self._admit()

    def cancel(self, request_id: str) -> None:
        task = self._tasks.pop(request_id, None)
        if task is not None:
            post = self._posts.pop(request_id, None)
            if post is not None:  # its reads stop now, not when the task next runs
                post.cancel()
            task.cancel()
            self._freed()  # here: a task cancelled before it runs never reaches its end
            self._admit()
        else:  # still waiting for its due time or a slot, if anywhere
            self._waiting = deque(w for w in self._waiting if w[0] != request_id)
            for due, batch in self._ahead.items():
                self._ahead[due] = [w for w in batch if w[0] != request_id]
            self._ahead_count = sum(map(len, self._ahead.values()))

    async def close(self) -> None:
        self._waiting.clear()
        self._ahead.clear()
        self._ahead_count = 0
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._http.close()
        self.monitor.close()

    def _admit(self) -> None:
        """Start what waits, in order, while the limit allows."""
        loop = asyncio.get_running_loop()
        while self._waiting and (self._limit is None or len(self._tasks) < self._limit):
            request_id, body, due = self._waiting.popleft()
            submit = max(due, self._slot_opened)
            self._tasks[request_id] = loop.create_task(self._slot(request_id, body, submit))

    def _freed(self) -> None:
        """A stream has left: a full window's opened slot is the submit time of a request waiting."""
        if self._limit is not None and len(self._tasks) == self._limit - 1:
            self._slot_opened = perf_counter()

    async def _slot(self, request_id: str, body: bytes, submit: float) -> None:
        """A slot's streams, one after another in this task: its first, then one waiting whenever one
        ends. As in a bare client, the next request begins in the task that ended the last, with no
        turn of the loop between, in which the rest of a burst of reads (a server's tick for all its
        streams) would go first."""
        task = asyncio.current_task()
        while True:
            await self._stream(request_id, body, submit)
            if self._tasks.pop(request_id, None) is None:
                return  # cancelled, which freed the slot
            self._freed()
            if not self._waiting:
                return
            request_id, body, due = self._waiting.popleft()
            submit = max(due, self._slot_opened)
            self._tasks[request_id] = task

    async def _stream(self, request_id: str, body: bytes, submit: float) -> None:
        sink = self._sink
        self.monitor.started()  # here, not in start(): a task cancelled before it runs never ends either
        post = self._posts[request_id] = Post(request_id, sink, perf_counter())
        sink((request_id, post.phases[0], submit))
        try:
            failure = await self._http.post(body, post)
        except Exception as e:  # a request that fails unseen would keep the run waiting for it forever
            logger.exception("request %s", request_id)
            failure = f"client error: {type(e).__name__}: {e}"
        finally:
            self.monitor.ended()
            if self._posts.get(request_id) is post:  # (a cancel took it out, maybe for a new one)
                del self._posts[request_id]
        sink((request_id, perf_counter(), failure))


class ThreadLoop:
    """backend.workers 1: the streams on a loop in a thread of the runner's process; what they read
    waits in a queue until receive(). Starts and cancels reach the loop together at the next
    send_pending() (which receive() calls first): a burst of submits crosses to the loop's thread once,
    and its streams begin in one turn of the loop, not each after its own wait for the GIL."""

    def __init__(self, settings: StreamSettings):
        self._queue: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._outbox: list[tuple] = []  # (method, args) for the loop, in order
        self._streams = StreamLoop(settings, self._queue.put)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="openai-client", daemon=True)
        self._thread.start()
        self._call(self._streams.open())

    def start(self, request_id: str, body: bytes, due: float) -> None:
        self._outbox.append((self._streams.start, (request_id, body, due)))

    def cancel(self, request_id: str) -> None:
        self._outbox.append((self._streams.cancel, (request_id,)))

    def usage(self) -> list[dict]:
        """The loop's LoopMonitor figures, as the one worker's."""
        return [self._call(self._usage())]

    async def _usage(self) -> dict:
        return self._streams.monitor.usage()

    def send_pending(self) -> None:
        """Hand the starts and cancels since the last call to the loop, in one crossing."""
        if self._outbox:
            self._loop.call_soon_threadsafe(_run_all, self._outbox)
            self._outbox = []

    def receive(self, timeout: float) -> list[tuple]:
        """What arrived (after send_pending), waiting up to `timeout` seconds for the first of it."""
        self.send_pending()
        try:
            items = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while not self._queue.empty():  # only this thread takes from the queue
            items.append(self._queue.get_nowait())
        return items

    def close(self) -> None:
        self._outbox.clear()  # streams not yet begun are not begun now
        self._call(self._streams.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()


def _run_all(calls: list[tuple]) -> None:
    for method, args in calls:
        method(*args)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (its reads and callbacks cost less), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def raise_open_file_limit() -> None:
    """A socket a stream: thousands at once pass a default soft limit of 1024 (SGLang's client does this)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
