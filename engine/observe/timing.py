"""Per-step measurements. One StepRecord per engine step; its fields are the columns of steps.csv,
so they stay flat scalars. Host phases are timed with perf_counter laps, a handful per step; GPU
time with CUDA events recorded on the stream and read once they have fired, never forcing a sync."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from llmbench.engine.observe.nvtx_ranges import NvtxRanges


@dataclass
class StepRecord:
    step: int
    t_start: float  # perf_counter seconds
    t_end: float
    # batch shape
    num_prefill_tokens: int
    num_decode_seqs: int
    num_running: int
    num_waiting: int
    num_blocks_used: int
    num_preempted: int
    num_steps: int  # forwards in this step
    # host phases, milliseconds
    schedule_ms: float
    prepare_ms: float  # input preparation and kernel launch
    sample_ms: float  # includes the token readback, the step's one host sync
    output_ms: float
    ipc_ms: float = 0.0
    comm_ms: float = 0.0  # tensor parallel: host time in broadcasts and all-reduces (within prepare/sample)
    # the step's device work, first kernel to last (CUDA only; NaN elsewhere)
    gpu_ms: float = math.nan
    gpu_start: float = math.nan  # perf_counter seconds
    gpu_end: float = math.nan
    # KV positions the batch's attention reads (sum of the scheduled sequences' lengths): MBU and MFU
    num_context_tokens: int = 0
    # causal query-key pairs of the first forward: a decode's is its length, a prompt chunk of n tokens
    # after p cached ones n*p + n(n+1)/2 (FLOPs of prefill attention)
    num_attention_pairs: int = 0


class PhaseClock:
    """Milliseconds between consecutive laps, starting at construction. With NVTX ranges (a profiler
    attached) the step and its phases also become ranges: each lap closes the phase that ran and
    opens `next_phase`; a lap without one closes the step."""

    __slots__ = ("start", "last", "_ranges")

    def __init__(self, ranges: NvtxRanges | None = None, step: int = 0, phase: str = "schedule") -> None:
        self.start = self.last = time.perf_counter()
        self._ranges = ranges
        if ranges is not None:
            ranges.push_step(step)
            ranges.push(phase)

    def lap_ms(self, next_phase: str | None = None) -> float:
        now = time.perf_counter()
        elapsed = (now - self.last) * 1e3
        self.last = now
        if self._ranges is not None:
            self._ranges.pop()
            if next_phase is None:
                self._ranges.pop()
            else:
                self._ranges.push(next_phase)
        return elapsed


class GpuSpan:
    """Start and end events around one step's device work; reused through GpuTimer's ring. The
    executor calls `record_start` once the host has prepared the step's inputs, just before the first
    forward's launch, so host work of a step the device waits for is idle time, not busy."""

    __slots__ = ("start", "end", "_stream")

    def __init__(self, new_event: Callable[[], object], stream: object):
        self.start = new_event()
        self.end = new_event()
        self._stream = stream

    def record_start(self) -> None:
        self.start.record(self._stream)


RESOLVE_EVERY = 32  # steps tracked before their times are read, all in one pass
ANCHOR_TRIES = 3  # the first synchronize waits for any work queued before; the others find the device idle


class GpuTimer:
    """Fills StepRecord.gpu_* from events recorded on the current stream. Events wait in a small ring
    until they have fired (`query`), so reading them never stalls the host. Event times become host
    times through one anchor: an event recorded and synchronized at construction, paired with the host
    time it fired at; afterwards t(event) = anchor_host + elapsed(anchor, event).

    A CUDA call costs a GPU host several us, and the first one after a stretch of Python several
    times that (docs/measurements/h200/call_costs.json). So a step records its two events, and the times are
    read every RESOLVE_EVERY steps (or when drained) in one pass: events on one stream fire in order,
    so one query of the newest that has fired answers for every span before it."""

    def __init__(
        self,
        ring_size: int = 64,
        new_event: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        stream = None  # fake events (tests) record on none
        if new_event is None:
            import torch

            def new_event() -> object:
                return torch.cuda.Event(enable_timing=True)

            stream = torch.cuda.current_stream()  # held: looking it up is a slow Python call
        self._stream = stream
        self._free = [GpuSpan(new_event, stream) for _ in range(ring_size)]
        self._waiting: deque[tuple[GpuSpan, StepRecord]] = deque()
        self._anchor, self._anchor_host = _anchor(new_event, stream, clock)

    def span(self) -> GpuSpan:
        """A free span for the next step; its start is recorded by the executor (see GpuSpan)."""
        if not self._free:
            self._waiting[0][0].end.synchronize()  # ring full: wait for the oldest, long since launched
            self._resolve_oldest()
        return self._free.pop()

    def stop(self, span: GpuSpan) -> None:
        span.end.record(self._stream)

    def track(self, span: GpuSpan, record: StepRecord) -> None:
        """Fill `record` from `span` once its events have fired, read with those of the steps after it."""
        self._waiting.append((span, record))
        if len(self._waiting) >= RESOLVE_EVERY:
            self.resolve()

    def resolve(self, wait: bool = False) -> None:
        """Fill the records whose events have fired, in order; with wait, all of them."""
        if wait and self._waiting:
            self._waiting[-1][0].end.synchronize()
            fired = len(self._waiting)
        else:
            fired = self._num_fired()
        for _ in range(fired):
            self._resolve_oldest()

    def _num_fired(self) -> int:
        """How many of the oldest tracked spans have fired: asked from the newest back, since the
        steps launched last (one or two in flight) are the ones that may not have."""
        for i in range(len(self._waiting) - 1, -1, -1):
            if self._waiting[i][0].end.query():
                return i + 1
        return 0

    def oldest_unresolved(self) -> StepRecord | None:
        """The earliest tracked record whose GPU times are not filled in yet."""
        return self._waiting[0][1] if self._waiting else None

    def _resolve_oldest(self) -> None:
        """The oldest span's times, its end event known to have fired."""
        span, record = self._waiting.popleft()
        start_ms = self._anchor.elapsed_time(span.start)
        end_ms = self._anchor.elapsed_time(span.end)
        record.gpu_start = self._anchor_host + start_ms / 1e3
        record.gpu_end = self._anchor_host + end_ms / 1e3
        record.gpu_ms = end_ms - start_ms
        self._free.append(span)


def _anchor(
    new_event: Callable[[], object], stream: object, clock: Callable[[], float]
) -> tuple[object, float]:
    """An event fired on an idle device, and the host time it fired at: the middle of the host clock
    read just before recording it and just after synchronizing on it, the narrowest of ANCHOR_TRIES
    such windows. One window alone can hold a preemption of the host thread between the two reads,
    which would shift every step's GPU times by it (a few hundred us on a loaded CPU)."""
    best = None
    for _ in range(ANCHOR_TRIES):
        event = new_event()
        before = clock()
        event.record(stream)
        event.synchronize()
        after = clock()
        if best is None or after - before < best[2] - best[1]:
            best = (event, before, after)
    event, before, after = best
    return event, (before + after) / 2


def step_timer(executor: object) -> GpuTimer | None:
    """The timer of an executor's device work: CUDA events on a GPU, the null executor's simulated
    device when it has one (model.null_forward_ms), none otherwise."""
    if executor.device.type == "cuda":
        return GpuTimer()
    simulated = getattr(executor, "forwards", None)
    return GpuTimer(new_event=simulated.event, clock=simulated.clock) if simulated is not None else None
