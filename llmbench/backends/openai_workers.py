"""backend.workers N > 1: the streams spread over N worker processes, each with its own event loop and
connection pool, none sharing a GIL with the runner or another worker.

The runner still submits every request at its time from the one arrival schedule (and keeps
max_concurrency); each goes to the worker with the fewest streams. A worker reads and stamps
(openai_loop.StreamLoop) and, once per turn of its loop, sends what it read to the runner as one
msgpack frame on its stdout; the runner's poll parses it as it would a thread's. Stamps are
perf_counter, CLOCK_MONOTONIC: the runner's clock too.

Frames both ways: a 4-byte little-endian length, then msgpack. To a worker: ["start", id, body] or
["cancel", id]; its stdin closing stops it. From a worker: a list of (id, stamp, bytes | message |
None) as openai_loop describes, the first one empty, once it is ready."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from multiprocessing.connection import wait

import msgspec

from llmbench.backends.openai_loop import StreamLoop, StreamSettings, new_event_loop

STREAMS_PER_WORKER = 256  # backend.workers auto: one loop keeps its stamps near a bare client's up to here
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
PIPE_BYTES = 1 << 20  # each worker's pipe to the runner holds this much, so a busy runner rarely blocks one
_HEADER = 4


def worker_count(setting: int | str, workload) -> int:
    """backend.workers as a number. `auto`: one worker per STREAMS_PER_WORKER streams of the configured
    concurrency (workload.max_concurrency, else its number of requests), at most the usable cores less
    one (the runner's own), at least one (which streams from a thread of the runner's process)."""
    if setting != "auto":
        return setting
    streams = workload.max_concurrency or workload.num_requests
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores - 1, math.ceil(streams / STREAMS_PER_WORKER)))


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(_HEADER, "little") + payload


def split_frames(buffer: bytearray) -> list[bytes]:
    """The whole frames at the front of `buffer`, removed from it."""
    frames, at = [], 0
    while len(buffer) - at >= _HEADER:
        size = int.from_bytes(buffer[at : at + _HEADER], "little")
        if len(buffer) - at - _HEADER < size:
            break
        frames.append(bytes(buffer[at + _HEADER : at + _HEADER + size]))
        at += _HEADER + size
    del buffer[:at]
    return frames


class WorkerPool:
    """N worker processes; the runner's side of their pipes."""

    def __init__(self, count: int, settings: StreamSettings):
        command = [
            sys.executable,
            "-m",
            "llmbench.backends.openai_workers",
            json.dumps(dataclasses.asdict(settings)),
        ]
        self._workers = [
            subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, start_new_session=True
            )
            for _ in range(count)
        ]
        self._buffers = {w.stdout.fileno(): bytearray() for w in self._workers}
        self._index = {w.stdout.fileno(): i for i, w in enumerate(self._workers)}
        self._streams: list[set[str]] = [set() for _ in self._workers]  # live request ids per worker
        self._where: dict[str, int] = {}
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = msgspec.msgpack.Decoder().decode
        for w in self._workers:
            _grow_pipe(w.stdout.fileno())
        self._wait_ready()

    def start(self, request_id: str, body: bytes) -> None:
        worker = min(range(len(self._workers)), key=lambda i: len(self._streams[i]))
        self._streams[worker].add(request_id)
        self._where[request_id] = worker
        self._send(worker, ["start", request_id, body])

    def cancel(self, request_id: str) -> None:
        worker = self._where.get(request_id)
        if worker is not None:
            self._send(worker, ["cancel", request_id])

    def receive(self, timeout: float) -> list[tuple]:
        """What the workers read, waiting up to `timeout` seconds for the first of it."""
        items = []
        for pipe in wait([w.stdout for w in self._workers if not w.stdout.closed], timeout):
            fd = pipe.fileno()
            data = os.read(fd, PIPE_BYTES)
            if not data:
                items += self._lost(self._index[fd])
                continue
            buffer = self._buffers[fd]
            buffer += data
            for payload in split_frames(buffer):
                items += self._decode(payload)
        for request_id, _, data in items:
            if not isinstance(data, bytes):  # its end or failure: the stream has left its worker
                worker = self._where.pop(request_id, None)
                if worker is not None:
                    self._streams[worker].discard(request_id)
        return items

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

    def _send(self, worker: int, message: list) -> None:
        try:
            self._workers[worker].stdin.write(frame(self._encode(message)))
        except BrokenPipeError:
            pass  # the worker has exited: receive() fails its streams

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
                self._buffers[fd] += data
                if split_frames(self._buffers[fd]):
                    waiting.discard(fd)
            if waiting and time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"backend.workers: no worker ready within {READY_TIMEOUT_S:g} s")


def _grow_pipe(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or past /proc/sys/fs/pipe-max-size: the default pipe still works


async def _serve(settings: StreamSettings, to_runner) -> None:
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
        data = os.read(0, 1 << 16)
        if not data:
            loop.remove_reader(0)
            stopped.set_result(None)
            return
        commands.extend(data)
        for payload in split_frames(commands):
            kind, request_id, *body = decode(payload)
            if kind == "start":
                streams.start(request_id, body[0])
            else:
                streams.cancel(request_id)

    loop.add_reader(0, on_command)
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
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(settings, to_runner))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
