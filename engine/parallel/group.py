"""A rank's place in a tensor-parallel group and every collective the model and the runner issue.
LocalGroup (one rank) makes each of them a no-op, so the model and runner code is the same at any
size. TPGroup runs them over torch.distributed and times them: their host time is the step's comm_ms
(gloo on the CPU is synchronous, so that is the real cost; NCCL calls return once enqueued).

Rank 0 sends each step in one broadcast over the device group: a buffer of fixed size (every rank
sizes it from the config, packed_capacity) whose first entries are a header (the StepLayout and
whether graphs run; a layout of no forwards is the shutdown) followed by the step's packed inputs.
Workers wait for the next step inside that broadcast. Whether a worker is alive is watched apart from
the steps (engine/parallel/liveness.py): a rank that hangs or dies is a TensorParallelError on rank 0
within STEP_TIMEOUT_S."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from llmbench.engine.config import EngineConfig
from llmbench.engine.execution.step_layout import StepLayout
from llmbench.engine.observe.nvtx_ranges import nvtx_ranges, phase_range
from llmbench.engine.parallel.liveness import STOP_WAIT_S, Heartbeats, WorkerProcesses

STEP_TIMEOUT_S = 8.0
STARTUP_TIMEOUT = timedelta(minutes=10)  # weights load and kernels compile at different speeds per rank
IDLE_TIMEOUT = timedelta(days=7)  # a worker waits this long for the next step
_HEADER = 8  # the 7 StepLayout fields and use_graphs: 32 bytes, so the packed inputs stay 16-byte aligned
SPIN_S = 2e-3  # a CUDA worker spins this long for the next step's header, then polls every millisecond


class TensorParallelError(RuntimeError):
    """A rank died or stopped answering: the engine cannot go on."""


def packed_capacity(config: EngineConfig, max_len: int) -> int:
    """Entries of the buffer rank 0 broadcasts each step: the header and the largest packed inputs
    a step of this config can have, with sequences up to max_len (ModelFacts.max_model_len). Every
    rank computes it alike, so the broadcast's size is fixed and the header can travel inside it
    instead of in a broadcast of its own."""
    seqs, budget = config.max_num_seqs, config.max_num_batched_tokens
    # without chunked prefill a lone prompt may exceed the token budget, up to max_model_len
    tokens = budget if config.chunked_prefill else max(budget, max_len)
    width = -(-max_len // config.block_size)
    step = StepLayout(seqs, tokens, 1, width, seqs, seqs, False)
    window = StepLayout(seqs, seqs, config.num_scheduler_steps, width, seqs, seqs, True)  # decodes only
    return _HEADER + max(layout.sections()[1][-1] for layout in (step, window))


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

    def __init__(
        self,
        rank: int,
        size: int,
        device: torch.device,
        capacity: int,
        workers: WorkerProcesses | None = None,
    ):
        self.rank, self.size, self.device = rank, size, device
        self._workers = workers
        self.dead: str | None = None
        # created in the same order on every rank, as new_group requires. A timeout is each process's
        # own: rank 0 gives up on a step after STEP_TIMEOUT_S, a worker waits for one while the engine idles
        timeout = timedelta(seconds=STEP_TIMEOUT_S) if rank == 0 else IDLE_TIMEOUT
        control = dist.new_group(backend="gloo", timeout=timeout)
        self._step_group = dist.new_group(backend=dist.get_backend(), timeout=timeout)
        self._group = dist.group.WORLD  # startup: warm-up and capture under STARTUP_TIMEOUT
        self.heartbeats = Heartbeats(rank, control, workers, self.fail)
        # startup's forwards (the GPU warm-up, graph capture) run on every rank from the same local
        # batch, so rank 0 sends nothing until start_steps
        self._sending = False
        self._buffer = torch.zeros(capacity, dtype=torch.int32, device=device)
        on_cuda = device.type == "cuda"
        # rank 0's header is written on the host; on CUDA two pinned ones take turns, each refilled
        # only once its copy to the device is done
        self._headers = [torch.zeros(_HEADER, dtype=torch.int32, pin_memory=on_cuda) for _ in range(2)]
        self._copied = [torch.cuda.Event() for _ in self._headers] if on_cuda else []
        self._stream = torch.cuda.current_stream(device) if on_cuda else None  # as TokenReadback
        self._turn = 0
        self._comm_ms = 0.0
        self._range = phase_range(nvtx_ranges(), "comm")

    def start_steps(self) -> None:
        """Startup is over: rank 0 sends each step, whose collectives fail after STEP_TIMEOUT_S. Each
        rank gets here once its runner is built, and first waits for the others (under the startup
        timeout), so that no heartbeat waits for a rank still loading."""
        self.min_int(0)  # the wait: it returns (on the host, also on CUDA) once every rank is here
        self._group = self._step_group
        self._sending = True
        self.heartbeats.start()

    def fail(self, reason: str) -> None:
        """A rank is gone (the heartbeat thread found out): every later step fails with the reason."""
        if self.dead is None:
            self.dead = reason
        if self.device.type == "cuda":
            # NCCL never gives up on a missing peer: aborting the step group ends the collectives rank 0
            # is waiting for on the device. A gloo collective fails by itself (at once on a dead peer,
            # after its timeout on a hung one) and an abort would not end it
            self._step_group.abort()

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
        """The step's one broadcast. Its packed inputs already hold the decodes fed from the step in
        flight (InputBuffers writes them on the device before this), so async scheduling needs no
        broadcast of its own."""
        if not self._sending:
            return
        if self.dead is None:
            self.dead = self._workers.failure()  # a worker that exited while the engine was idle
        if self.dead is not None:
            raise TensorParallelError(self.dead)
        size = _HEADER + packed.numel()
        if size > self._buffer.numel():
            raise RuntimeError(
                f"a step's inputs take {size} entries, past packed_capacity {self._buffer.numel()}"
            )
        start = time.perf_counter()
        header = self._next_header()
        header.numpy()[:] = (*layout, use_graphs)
        self._buffer[:_HEADER].copy_(header, non_blocking=True)
        if self._copied:
            self._copied[self._turn].record(self._stream)
        self._buffer[_HEADER:size].copy_(packed, non_blocking=True)
        with self._range:
            self._call(dist.broadcast, self._buffer, src=0, group=self._group)
        self._comm_ms += (time.perf_counter() - start) * 1e3

    def send_tokens(self, tokens: torch.Tensor) -> None:
        """A window's sampled tokens: the next forward's input ids. A second broadcast within the step,
        because they exist only once the forward before has run, long after the step's buffer went out
        (folding them in would take every rank sampling, from all-gathered logits)."""
        if not self._sending:
            return
        start = time.perf_counter()
        with self._range:
            self._call(dist.broadcast, tokens.to(torch.int64), src=0, group=self._group)
        self._comm_ms += (time.perf_counter() - start) * 1e3

    def receive_step(self) -> tuple[StepLayout, bool, torch.Tensor] | None:
        """A worker's side of send_step: the layout, whether graphs run, and the packed inputs (a view
        of the group's buffer, valid until the next step); None when rank 0 shuts the group down."""
        dist.broadcast(self._buffer, src=0, group=self._group)
        values = self._read_header()
        if values[2] == 0:  # no forwards: the shutdown
            return None
        return StepLayout(*values[:6], bool(values[6])), bool(values[7]), self._buffer[_HEADER:]

    def receive_tokens(self, num_sample: int) -> torch.Tensor:
        tokens = torch.empty(num_sample, dtype=torch.int64, device=self.device)
        dist.broadcast(tokens, src=0, group=self._group)
        return tokens

    def take_comm_ms(self) -> float:
        """Milliseconds spent in collectives since the last call."""
        spent, self._comm_ms = self._comm_ms, 0.0
        return spent

    def shutdown(self) -> None:
        """Rank 0: tell the workers to exit (when they can still hear it). A worker: leave the group."""
        self.heartbeats.stop()
        if self.rank == 0 and self._sending and self.dead is None:
            self._buffer[:_HEADER].zero_()
            try:
                dist.broadcast(self._buffer, src=0, group=self._group)
            except RuntimeError:
                pass  # a worker already gone: stop() kills the rest
        dist.destroy_process_group()
        if self._workers is not None:
            self._workers.stop(wait_s=0.0 if self.dead else STOP_WAIT_S)

    def _next_header(self) -> torch.Tensor:
        self._turn = (self._turn + 1) % len(self._headers)
        if self._copied:
            self._copied[self._turn].synchronize()
        return self._headers[self._turn]

    def _read_header(self) -> list[int]:
        header = self._buffer[:_HEADER]
        if self.device.type != "cuda":
            return header.tolist()
        # a plain read would spin a core at 100% for as long as the engine idles; spinning only briefly
        # keeps a busy engine's next step as quick to start
        host = header.to("cpu", non_blocking=True)
        arrived = torch.cuda.Event()
        arrived.record()
        deadline = time.perf_counter() + SPIN_S
        while not arrived.query():
            if time.perf_counter() > deadline:
                time.sleep(1e-3)
        return host.tolist()

    def _call(self, collective: Callable, *args, **kwargs) -> None:
        try:
            collective(*args, **kwargs)
        except RuntimeError as e:
            if self.rank != 0:
                raise
            if self.dead is None:
                self.dead = (
                    self._workers.failure(wait_s=1.0)
                    or f"tensor-parallel collective failed (a rank hung or died): {e}"
                )
            raise TensorParallelError(self.dead) from e


Group = LocalGroup | TPGroup  # what the model and the runner are handed: their code is the same at any size
