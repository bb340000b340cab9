"""Whether every rank of a tensor-parallel group is still there, watched apart from the steps: rank 0
holds the worker processes (WorkerProcesses: which one exited, and stopping them all). A step's
collectives cannot tell rank 0 by themselves: on CUDA an NCCL broadcast or all-reduce whose peer is
gone waits forever on the device, and an idle worker waits in the next step's broadcast, not answering
anything. So once startup is over, a thread on rank 0 looks at the worker processes and exchanges a
heartbeat with a thread on every worker (an all-reduce over a gloo group, which fails after rank 0's
STEP_TIMEOUT_S when a rank stops answering) every HEARTBEAT_S. When a rank is gone it fails the group
(the group's on_failure), and the next step, or the one rank 0 is waiting for, fails with that reason."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

HEARTBEAT_S = 0.5
STOP_WAIT_S = 5.0  # a worker told to exit gets this long before it is killed

logger = logging.getLogger(__name__)


class WorkerProcesses:
    """The processes of ranks 1..size-1, in rank order."""

    def __init__(self, processes: list[subprocess.Popen]):
        self.processes = processes

    def failure(self, wait_s: float = 0.0) -> str | None:
        """Which rank exited, if one did; waits up to wait_s for one to (a collective that just
        failed: its peer may still be on the way out)."""
        deadline = time.monotonic() + wait_s
        while True:
            for rank, process in enumerate(self.processes, 1):
                code = process.poll()
                if code is not None:
                    return f"tensor-parallel rank {rank} exited with code {code}"
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Heartbeats:
    """Rank 0's watch over the workers, or a worker's answers to it: one daemon thread either way. On
    rank 0, on_failure gets the reason once a rank is gone."""

    def __init__(
        self,
        rank: int,
        control: dist.ProcessGroup,
        workers: WorkerProcesses | None,
        on_failure: Callable[[str], None],
    ):
        self._control, self._workers, self._on_failure = control, workers, on_failure
        self._stopping = threading.Event()
        target = self._watch if rank == 0 else self._answer
        self._thread = threading.Thread(target=target, name="tp-heartbeats", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Rank 0: stop watching and let the workers' threads end. A worker: wait for its thread to end."""
        if not self._thread.is_alive():
            return
        self._stopping.set()
        self._thread.join()

    def _watch(self) -> None:
        beat = torch.zeros(1, dtype=torch.int64)
        while not self._stopping.wait(HEARTBEAT_S):
            failure = self._workers.failure()
            if failure is None:
                try:
                    dist.all_reduce(beat, group=self._control)
                except RuntimeError as e:
                    failure = (
                        self._workers.failure(wait_s=1.0)
                        or f"tensor-parallel collective failed (a rank hung or died): {e}"
                    )
            if failure is not None:
                logger.error("%s", failure)
                self._on_failure(failure)
                return
        # the last beat tells the workers' threads to end
        try:
            dist.all_reduce(beat.fill_(1), group=self._control)
        except RuntimeError:
            pass  # a worker gone just now: shutdown kills the rest

    def _answer(self) -> None:
        beat = torch.zeros(1, dtype=torch.int64)  # a worker adds nothing: the sum is rank 0's word
        while not beat.item():
            try:
                dist.all_reduce(beat, group=self._control)
            except RuntimeError:
                return  # rank 0 is gone: the parent watch ends this process
