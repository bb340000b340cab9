"""backend.workers N > 1: the streams spread over N worker processes, each with its own event loop and
connection pool, none sharing a GIL with the runner or another worker.

The runner still submits every request at its time from the one arrival schedule, handing each to
the worker with the most room (openai_worker_set.py); each worker keeps its share of max_concurrency,
starting its next queued request when one of its streams ends. A worker reads and stamps
(openai_loop.StreamLoop) and, once per turn of its loop, sends what it read to the runner as one
msgpack frame on its stdout; the runner's poll parses it as it would a thread's. Stamps are
perf_counter, CLOCK_MONOTONIC: the runner's clock too. The frames are openai_worker_set's; a worker's
commands come on its stdin, and its stdin closing stops it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from multiprocessing.connection import wait

import msgspec

from llmbench.backends.openai_loop import StreamLoop, StreamSettings, new_event_loop
from llmbench.backends.openai_worker_set import WorkerSet, frame, slot_shares, split_frames

READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
PIPE_BYTES = 1 << 20  # each worker's pipe to the runner holds this much, so a busy runner rarely blocks one
# commands wait at most this long for send_pending: a burst of submits due now (a closed loop's next
# window, as its streams end together) reaches the workers as it is made, not once all of it is
HOLD_S = 0.001


class WorkerPool(WorkerSet):
    """N worker processes; the runner's side of their pipes."""

    def __init__(self, count: int, settings: StreamSettings):
        shares = slot_shares(settings.limit, count)
        super().__init__(shares)
        self._workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llmbench.backends.openai_workers",
                    json.dumps(dataclasses.asdict(dataclasses.replace(settings, limit=share))),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                start_new_session=True,
            )
            for share in shares
        ]
        self._index = {w.stdout.fileno(): i for i, w in enumerate(self._workers)}
        self._outbox: list[list[bytes]] = [[] for _ in range(count)]  # frames for the next send_pending()
        self._held_since: float | None = None  # when the oldest frame in the outbox was made
        for w in self._workers:
            grow_pipe(w.stdout.fileno())
            grow_pipe(w.stdin.fileno())
        self._wait_ready()

    def close(self) -> None:
        for w in self._workers:
            if not w.stdin.closed:
                w.stdin.close()  # a worker stops at the end of its input
        deadline = time.monotonic() + STOP_GRACE_S
        for w in self._workers:
            try:
                w.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
            w.stdout.close()

    def send_pending(self) -> None:
        """Each worker's commands since the last call in one write: a write a command cost the runner
        ~140 us each on 2 cores (the worker woken per frame), 145 ms for a burst of 1,024 starts."""
        self._held_since = None
        for worker, frames in enumerate(self._outbox):
            if not frames:
                continue
            data = b"".join(frames)
            frames.clear()
            try:
                self._workers[worker].stdin.write(data)
            except BrokenPipeError:
                pass  # the worker has exited: receive() fails its streams

    def _send(self, worker: int, message: list) -> None:
        self._outbox[worker].append(frame(self._encode(message)))
        now = time.perf_counter()
        if self._held_since is None:
            self._held_since = now
        elif now - self._held_since >= HOLD_S:
            self.send_pending()

    def _alive(self, worker: int) -> bool:
        return not self._workers[worker].stdout.closed

    def _read(self, timeout: float) -> list[tuple]:
        items = []
        for pipe in wait([w.stdout for w in self._workers if not w.stdout.closed], timeout):
            worker = self._index[pipe.fileno()]
            data = os.read(pipe.fileno(), PIPE_BYTES)
            items += self._items(worker, data) if data else self._lost(worker)
        return items

    def _lost(self, worker: int) -> list[tuple]:
        """Failures for the streams of a worker whose pipe closed (it exited)."""
        process = self._workers[worker]
        process.stdout.close()
        code = process.wait()
        now = time.perf_counter()
        message = f"client error: worker process {worker} exited with code {code}"
        return [(request_id, now, message) for request_id in self._streams[worker]]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = {w.stdout.fileno() for w in self._workers}
        while waiting:
            ready = wait([w.stdout for w in self._workers if w.stdout.fileno() in waiting], 1.0)
            for pipe in ready:
                fd = pipe.fileno()
                data = os.read(fd, PIPE_BYTES)
                if not data:
                    self.close()
                    raise RuntimeError(f"backend.workers: worker process {self._index[fd]} did not start")
                buffer = self._buffers[self._index[fd]]
                buffer += data
                if split_frames(buffer):
                    waiting.discard(fd)
            if waiting and time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"backend.workers: no worker ready within {READY_TIMEOUT_S:g} s")


def grow_pipe(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or past /proc/sys/fs/pipe-max-size: the default pipe still works


def run_worker(settings: StreamSettings, from_runner: int, to_runner) -> None:
    """A worker on an event loop of its own, until its commands (file descriptor `from_runner`) end;
    its frames go to `to_runner`, a binary pipe file. A worker process runs it on its stdin and stdout,
    a Ray actor (openai_ray.py) on a thread, with pipes of its own."""
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(settings, from_runner, to_runner))
    finally:
        loop.close()


async def _serve(settings: StreamSettings, from_runner: int, to_runner) -> None:
    """A worker's life: start and cancel streams as told, send what they read, stop when told."""
    loop = asyncio.get_running_loop()
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, to_runner)
    encode = msgspec.msgpack.Encoder().encode
    decode = msgspec.msgpack.Decoder().decode
    batch: list[tuple] = []

    def flush() -> None:  # once a turn of the loop, after every read of the turn is stamped
        writer.write(frame(encode(batch)))
        batch.clear()

    def sink(item: tuple) -> None:
        if not batch:
            loop.call_soon(flush)
        batch.append(item)

    streams = StreamLoop(settings, sink)
    await streams.open()
    flush()  # ready
    stopped = loop.create_future()
    commands = bytearray()

    def on_command() -> None:
        data = os.read(from_runner, 1 << 16)
        if not data:
            loop.remove_reader(from_runner)
            stopped.set_result(None)
            return
        commands.extend(data)
        for payload in split_frames(commands):
            kind, request_id, *body = decode(payload)
            if kind == "start":
                streams.start(request_id, *body)  # the request's body and its due time
            elif kind == "cancel":
                streams.cancel(request_id)
            else:
                sink(("", time.perf_counter(), streams.monitor.usage()))

    loop.add_reader(from_runner, on_command)
    await stopped
    await streams.close()
    if batch:
        flush()
    writer.close()


def main() -> None:
    settings = StreamSettings(**json.loads(sys.argv[1]))
    # the frames own stdout: anything printed by mistake goes to stderr instead
    to_runner = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    run_worker(settings, 0, to_runner)


if __name__ == "__main__":
    main()
