"""A rank's place in a tensor-parallel group and every collective the model and the runner issue.
LocalGroup (one rank) makes each of them a no-op, so the model and runner code is the same at any
size. TPGroup runs them over torch.distributed and times them: their host time is the step's comm_ms
(gloo on the CPU is synchronous, so that is the real cost; NCCL calls return once enqueued).

Rank 0 sends each step as a small header (the StepLayout, over a gloo group whose wait has no
practical timeout on a worker, so idle workers can wait there for the next step) and then the packed input
buffer in one broadcast over the device group. Collectives of a step run with STEP_TIMEOUT_S: a rank
that hangs or dies turns into a TensorParallelError on rank 0 within it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from engine.nvtx_ranges import nvtx_ranges, phase_range

if TYPE_CHECKING:
    from engine.input_batch import StepLayout
    from engine.parallel.launch import WorkerProcesses

STEP_TIMEOUT_S = 8.0
STOP_WAIT_S = 5.0  # a worker told to exit gets this long before it is killed
STARTUP_TIMEOUT = timedelta(minutes=10)  # weights load and kernels compile at different speeds per rank
IDLE_TIMEOUT = timedelta(days=7)  # a worker waits this long for the next step's header
_SHUTDOWN, _STEP = 0, 1
_HEADER_LEN = 10  # command, the 7 StepLayout fields, use_graphs, buffer size


class TensorParallelError(RuntimeError):
    """A rank died or stopped answering: the engine cannot go on."""


class LocalGroup:
    """A group of one: nothing to communicate."""

    rank, size = 0, 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def gather_vocab(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return logits

    def min_int(self, value: int) -> int:
        return value

    def send_step(self, packed: torch.Tensor, layout: StepLayout, use_graphs: bool) -> None:
        pass

    def send_tokens(self, tokens: torch.Tensor) -> None:
        pass

    def take_comm_ms(self) -> float:
        return 0.0

    def start_steps(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


LOCAL = LocalGroup()


class TPGroup:
    """One rank of a group set up by torch.distributed (engine/parallel/launch.py on rank 0,
    engine/parallel/worker.py on the others). Rank 0 holds the worker processes: they name the rank
    that died, and are stopped with the group."""

    def __init__(self, rank: int, size: int, device: torch.device, workers: WorkerProcesses | None = None):
        self.rank, self.size, self.device = rank, size, device
        self._workers = workers
        self.dead: str | None = None
        backend = dist.get_backend()
        # created in the same order on every rank, as new_group requires
        # a timeout is each process's own: rank 0 gives up on a header after STEP_TIMEOUT_S, while a
        # worker waits for one as long as the engine idles
        control_timeout = timedelta(seconds=STEP_TIMEOUT_S) if rank == 0 else IDLE_TIMEOUT
        self._control = dist.new_group(backend="gloo", timeout=control_timeout)
        self._step_group = dist.new_group(backend=backend, timeout=timedelta(seconds=STEP_TIMEOUT_S))
        self._group = dist.group.WORLD  # startup: warm-up and capture under STARTUP_TIMEOUT
        # startup's forwards (the GPU warm-up, graph capture) run on every rank from the same local
        # batch, so rank 0 sends nothing until start_steps
        self._sending = False
        self._header = torch.zeros(_HEADER_LEN, dtype=torch.int64)
        self._comm_ms = 0.0
        self._range = phase_range(nvtx_ranges(), "comm")

    def start_steps(self) -> None:
        """Startup is over: rank 0 sends each step, whose collectives fail after STEP_TIMEOUT_S."""
        self._group = self._step_group
        self._sending = True

    # collectives of the model (every rank)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        with self._range:
            self._call(dist.all_reduce, x, group=self._group)
        self._comm_ms += (time.perf_counter() - start) * 1e3
        return x

    def gather_vocab(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Each rank's vocabulary slice of the logits, joined on rank 0 (the only rank that samples);
        the other ranks get their own slice back."""
        start = time.perf_counter()
        parts = [torch.empty_like(logits) for _ in range(self.size)] if self.rank == 0 else None
        with self._range:
            self._call(dist.gather, logits, parts, dst=0, group=self._group)
        self._comm_ms += (time.perf_counter() - start) * 1e3
        if parts is None:
            return logits
        joined = torch.cat(parts, dim=-1)
        return joined if joined.shape[-1] == vocab_size else joined[:, :vocab_size]

    def min_int(self, value: int) -> int:
        """The smallest of every rank's value (the KV pool every rank can hold)."""
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self._call(dist.all_reduce, t, op=dist.ReduceOp.MIN, group=self._group)
        return int(t.item())

    # a step's inputs, rank 0 -> the others

    def send_step(self, packed: torch.Tensor, layout: StepLayout, use_graphs: bool) -> None:
        if not self._sending:
            return
        if self.dead is None:
            self.dead = self._workers.failure()  # a worker that exited while the engine was idle
        if self.dead is not None:
            raise TensorParallelError(self.dead)
        start = time.perf_counter()
        self._header.numpy()[:] = (_STEP, *layout, use_graphs, packed.numel())
        with self._range:
            self._call(dist.broadcast, self._header, src=0, group=self._control)
            self._call(dist.broadcast, packed, src=0, group=self._group)
        self._comm_ms += (time.perf_counter() - start) * 1e3

    def send_tokens(self, tokens: torch.Tensor) -> None:
        """A window's sampled tokens: the next forward's input ids."""
        if not self._sending:
            return
        start = time.perf_counter()
        with self._range:
            self._call(dist.broadcast, tokens.to(torch.int64), src=0, group=self._group)
        self._comm_ms += (time.perf_counter() - start) * 1e3

    def receive_step(
        self, buffer: Callable[[int], torch.Tensor]
    ) -> tuple[StepLayout, bool, torch.Tensor] | None:
        """A worker's side of send_step: the layout, whether graphs run, and the packed buffer (from
        `buffer(size)`); None when rank 0 shuts the group down."""
        from engine.input_batch import StepLayout  # the model imports this module: no import cycle

        header = self._header
        dist.broadcast(header, src=0, group=self._control)
        values = header.tolist()
        if values[0] == _SHUTDOWN:
            return None
        packed = buffer(values[9])
        dist.broadcast(packed, src=0, group=self._group)
        return StepLayout(*values[1:7], bool(values[7])), bool(values[8]), packed

    def receive_tokens(self, num_sample: int) -> torch.Tensor:
        tokens = torch.empty(num_sample, dtype=torch.int64, device=self.device)
        dist.broadcast(tokens, src=0, group=self._group)
        return tokens

    def take_comm_ms(self) -> float:
        """Milliseconds spent in collectives since the last call."""
        spent, self._comm_ms = self._comm_ms, 0.0
        return spent

    def shutdown(self) -> None:
        """Rank 0: tell the workers to exit (when they can still hear it)."""
        if self.rank == 0 and self.dead is None:
            self._header.zero_()
            try:
                dist.broadcast(self._header, src=0, group=self._control)
            except RuntimeError:
                pass  # a worker already gone: stop() kills the rest
        dist.destroy_process_group()
        if self._workers is not None:
            self._workers.stop(wait_s=0.0 if self.dead else STOP_WAIT_S)

    def _call(self, collective: Callable, *args, **kwargs) -> None:
        try:
            collective(*args, **kwargs)
        except RuntimeError as e:
            if self.rank != 0:
                raise
            self.dead = (
                self._workers.failure(wait_s=1.0)
                or f"tensor-parallel collective failed (a rank hung or died): {e}"
            )
            raise TensorParallelError(self.dead) from e
