"""Whether every rank of a tensor-parallel group is still there, watched apart from the steps. A step's
collectives cannot tell rank 0 by themselves: on CUDA an NCCL broadcast or all-reduce whose peer is
gone waits forever on the device, and an idle worker waits in the next step's broadcast, not answering
anything. So once startup is over, a thread on rank 0 looks at the worker processes and exchanges a
heartbeat with a thread on every worker (an all-reduce over a gloo group, which fails after rank 0's
STEP_TIMEOUT_S when a rank stops answering) every HEARTBEAT_S. When a rank is gone it fails the group
(TPGroup.fail), and the next step, or the one rank 0 is waiting for, fails with that reason."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from llmbench.engine.parallel.group import TPGroup
    from llmbench.engine.parallel.launch import WorkerProcesses

HEARTBEAT_S = 0.5

logger = logging.getLogger(__name__)


class Heartbeats:
    """Rank 0's watch over the workers, or a worker's answers to it: one daemon thread either way."""

    def __init__(self, group: TPGroup, control: dist.ProcessGroup, workers: WorkerProcesses | None):
        self._group, self._control, self._workers = group, control, workers
        self._stopping = threading.Event()
        target = self._watch if group.rank == 0 else self._answer
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
                self._group.fail(failure)
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
