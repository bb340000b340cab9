"""backend.ray_address: the stream workers as Ray actors, spread over the hosts of a Ray cluster.

Each actor runs the worker process's own function (openai_workers.run_worker) on a thread, fed through
a pipe as a worker process is fed through its stdin; the runner, the Ray driver, still submits every
request at its time from the one arrival schedule and merges the rows.

Clocks. A worker stamps on its host's perf_counter. The driver picks a start, its wall clock when the
actors are made; each actor takes the reading of its own perf_counter at that wall time, and its stamps
reach the runner moved by the difference of the two readings. Differences of a worker's stamps (ITL,
TPOT, the HTTP phases) are on one host's clock and exact; what is measured from the runner's submit time
(TTFT, E2E, the schedule lag) also holds the Ray hop, as a late send should, and the hosts' wall-clock
disagreement, which a synced cluster (NTP, PTP) usually keeps below a millisecond. Every actor's clock is
checked against the driver's over a Ray round trip when it starts (CLOCK_TOLERANCE_S)."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import select
import socket
import threading
import time
from time import perf_counter
from types import ModuleType

from llmbench.backends.client_capacity import choose_workers
from llmbench.backends.openai_loop import StreamSettings
from llmbench.backends.openai_worker_set import WorkerSet, frame, slot_shares, split_frames
from llmbench.backends.openai_workers import (
    PIPE_BYTES,
    READY_TIMEOUT_S,
    STOP_GRACE_S,
    grow_pipe,
    run_worker,
)

logger = logging.getLogger(__name__)

INSTALL = "pip install 'llmbench[ray]'"
RAY_CLIENT_PORT = 10001  # ray start --head's Ray Client server
READ_WAIT_S = 0.05  # an actor's read() returns empty after this long, so none outlives close() by more
CLOCK_TOLERANCE_S = 0.002  # an actor's clock this far outside a round trip to it is reported
CLOCK_PINGS = 3


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ValueError(f"backend.ray_address: Ray is not installed: {INSTALL}") from None
    return ray


def reach_cluster(address: str, timeout_s: float) -> None:
    """Refuse an address ray.init cannot use: ray:// without Ray Client's package, or one no Ray cluster
    answers on within `timeout_s` (ray.init retries an unreachable GCS for as long as it runs, a line
    every ~40 s, and took half a minute more to stop on SIGTERM). What answers is Ray's to judge;
    `local` starts its own cluster."""
    named = os.environ.get("RAY_ADDRESS")
    used = named if address == "auto" and named and named != "auto" else address  # as ray.init reads it
    if "://" in used and not _has_ray_client():
        raise ValueError(f"backend.ray_address {address}: Ray Client needs ray[client]: {INSTALL}")
    target = _bootstrap_address(used)
    host, _, port = (target or "").rpartition(":")
    if not host or not port.isdigit():
        return  # nothing to reach, or a form ray.init has its own words for
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        if isinstance(e, TimeoutError):
            reason = f"no answer within {timeout_s:g} s (backend.ray_connect_timeout_s)"
        else:
            reason = e.strerror or type(e).__name__
        raise ValueError(
            f"backend.ray_address {address}: no Ray cluster reached at {target}: {reason}"
        ) from None


def _has_ray_client() -> bool:
    try:
        import grpc  # noqa: F401  (what ray[client] adds to Ray)
    except ImportError:
        return False
    return True


def _bootstrap_address(address: str) -> str | None:
    """The host:port ray.init connects to first: Ray Client's server for ray:// (its default port if none
    is given); for `auto`, the cluster the last `ray start` on this host recorded. None where there is
    nothing to reach: `local`, or `auto` with no cluster known, which ray.init refuses at once."""
    if address == "local":
        return None
    if "://" in address:
        target = address.split("://", 1)[1].split("/")[0]
        return target if re.search(r":\d+$", target) else f"{target}:{RAY_CLIENT_PORT}"
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            return canonicalize_bootstrap_address("auto")
        except ConnectionError:
            return None
    return address


class StreamActor:
    """One worker in a Ray actor: run_worker on a thread, its command and frame pipes held here. Made
    a Ray actor with a concurrency group of its own for read(), so a read waiting for frames never holds
    back a command."""

    def __init__(self, settings: dict, start_wall: float):
        # this host's perf_counter when its wall clock read the driver's start
        self.origin = perf_counter() - (time.time() - start_wall)
        commands, self._commands = os.pipe()
        self._frames, frames = os.pipe()
        grow_pipe(self._frames)
        self._closing = False
        self._thread = threading.Thread(
            target=run_worker,
            args=(StreamSettings(**settings), commands, os.fdopen(frames, "wb", buffering=0)),
            name="llmbench-stream-worker",
            daemon=True,
        )
        self._thread.start()
        self._ready = self._read_ready()

    def now(self) -> tuple[float, float]:
        """Its start reading and its clock now (the driver's clock check)."""
        return self.origin, perf_counter()

    def send(self, frames: bytes) -> None:
        view = memoryview(frames)
        while view:  # a blocking pipe takes it all, in pieces when it is long
            view = view[os.write(self._commands, view) :]

    def read(self, wait_s: float) -> bytes:
        """What the worker wrote (whole frames or not), waiting up to `wait_s` for the first of it."""
        if self._ready:
            ready, self._ready = self._ready, b""
            return ready
        if not select.select([self._frames], [], [], wait_s)[0]:
            if not self._thread.is_alive() and not self._closing:
                raise RuntimeError("the worker's event loop stopped")
            return b""
        data = os.read(self._frames, PIPE_BYTES)
        if not data and not self._closing:
            raise RuntimeError("the worker's event loop stopped")
        return data

    def close(self) -> None:
        self._closing = True
        os.close(self._commands)  # the worker stops at the end of its commands
        self._thread.join(STOP_GRACE_S)

    def _read_ready(self) -> bytes:
        """Wait for the worker's first frame (empty: it is ready); what came with it is kept for read()."""
        buffer = bytearray()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not split_frames(bytearray(buffer)):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the worker did not start within {READY_TIMEOUT_S:g} s")
            if select.select([self._frames], [], [], 1.0)[0]:
                buffer += os.read(self._frames, PIPE_BYTES)
        return bytes(buffer)


class RayWorkers(WorkerSet):
    """The runner's side: `backend.workers` StreamActors spread over the cluster, each with one read()
    outstanding."""

    def __init__(
        self, setting: int | str, workload, settings: StreamSettings, address: str, connect_timeout_s: float
    ):
        ray = self._ray = import_ray()
        self._owns = not ray.is_initialized()  # a program that joined a cluster itself keeps it
        if self._owns:
            reach_cluster(address, connect_timeout_s)
            # `local`: a cluster of this host alone, reachable on loopback only, without its dashboard
            local = {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
            try:
                ray.init(address=address, **(local if address == "local" else {}))
            except ConnectionError as e:  # no cluster there: `auto` with none running, a wrong address
                raise ValueError(f"backend.ray_address {address}: {e}") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        choice = choose_workers(setting, workload, cpus)
        logger.info("client: %s, Ray actors over a cluster of %d CPUs", choice.reason, cpus)
        count = choice.count
        shares = slot_shares(settings.limit, count)
        super().__init__(shares)
        actor = ray.remote(num_cpus=1, scheduling_strategy="SPREAD", concurrency_groups={"reads": 1})(
            StreamActor
        )
        start_wall, self._origin = time.time(), perf_counter()
        self._actors = [
            actor.remote(dataclasses.asdict(dataclasses.replace(settings, limit=share)), start_wall)
            for share in shares
        ]
        try:
            ray.get([a.now.remote() for a in self._actors], timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self._stop()
            raise ValueError(
                f"backend.ray_address: {count} workers not placed within {READY_TIMEOUT_S:g} s (each takes "
                f"a CPU; the cluster has {cpus})"
            ) from None
        except ray.exceptions.RayError as e:
            self._stop()
            raise ValueError(f"backend.ray_address: a worker did not start: {_reason(e)}") from None
        self._offsets = [self._clock_offset(i) for i in range(count)]  # onto the driver's perf_counter
        self._live = set(range(count))
        self._outbox: list[list] = [[] for _ in range(count)]  # commands for the next send_pending()
        self._reads = {self._ask(i): i for i in range(count)}
        logger.info("Ray workers: %d, over a cluster of %d CPUs", count, cpus)

    def close(self) -> None:
        try:
            self._ray.get([self._actors[i].close.remote() for i in self._live], timeout=STOP_GRACE_S)
        except self._ray.exceptions.RayError:
            pass  # a worker that cannot stop in time is killed with the others
        self._stop()

    def _stop(self) -> None:
        for a in self._actors:
            self._ray.kill(a)
        if self._owns:
            self._ray.shutdown()

    def _send(self, worker: int, message: list) -> None:
        self._outbox[worker].append(message)

    def _alive(self, worker: int) -> bool:
        return worker in self._live

    def _offset(self, worker: int) -> float:
        return self._offsets[worker]

    def _read(self, timeout: float) -> list[tuple]:
        """Send the commands waiting, then what the workers read, on the driver's clock."""
        self.send_pending()
        ray = self._ray
        if not self._reads:
            time.sleep(timeout)
            return []
        ready, _ = ray.wait(list(self._reads), num_returns=1, timeout=timeout)
        if ready and len(self._reads) > 1:
            ready, _ = ray.wait(list(self._reads), num_returns=len(self._reads), timeout=0)
        items = []
        for ref in ready:
            worker = self._reads.pop(ref)
            try:
                data = ray.get(ref)
            except ray.exceptions.RayError as e:
                items += self._lost(worker, e)
                continue
            self._reads[self._ask(worker)] = worker
            offset = self._offsets[worker]
            for request_id, stamp, value in self._items(worker, data):
                if isinstance(value, list):  # the request's HTTP phases, stamped too
                    value = [None if t is None else t + offset for t in value]
                elif isinstance(value, float):  # its submit time
                    value += offset
                items.append((request_id, stamp + offset, value))
        return items

    def send_pending(self) -> None:
        """The commands since the last send, one Ray call a worker: the runner polls right after it
        submits, and a burst of submits costs a call, not one a request."""
        for worker, commands in enumerate(self._outbox):
            if commands and worker in self._live:
                self._actors[worker].send.remote(b"".join(frame(self._encode(c)) for c in commands))
            commands.clear()

    def _ask(self, worker: int):
        return self._actors[worker].read.options(concurrency_group="reads").remote(READ_WAIT_S)

    def _lost(self, worker: int, error: Exception) -> list[tuple]:
        """Failures for the streams of a worker whose actor failed."""
        self._live.discard(worker)
        now = perf_counter()
        message = f"client error: Ray worker {worker} failed: {_reason(error)}"
        return [(request_id, now, message) for request_id in self._streams[worker]]

    def _clock_offset(self, worker: int) -> float:
        """What moves the worker's stamps onto the driver's perf_counter; a worker whose moved clock
        falls outside a round trip to it by more than CLOCK_TOLERANCE_S is reported."""
        ray = self._ray
        best = None
        for _ in range(CLOCK_PINGS):
            sent = perf_counter()
            origin, now = ray.get(self._actors[worker].now.remote())
            back = perf_counter()
            if best is None or back - sent < best[1] - best[0]:
                best = (sent, back, now - origin + self._origin)
        sent, back, moved = best
        off = max(sent - moved, moved - back, 0.0)
        if off > CLOCK_TOLERANCE_S:
            logger.warning(
                "Ray worker %d's clock is %.1f ms off the driver's (beyond a %.1f ms round trip): TTFT, E2E "
                "and the schedule lag carry that; sync the hosts' clocks (NTP, PTP)",
                worker,
                off * 1e3,
                (back - sent) * 1e3,
            )
        return self._origin - origin


def _reason(error: Exception) -> str:
    """The last line of a Ray error's message (the exception the actor raised, under its traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
