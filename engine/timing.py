"""Per-step measurements. One StepRecord per engine step; its fields are the columns of steps.csv,
so they stay flat scalars. Host phases are timed with perf_counter laps, a handful per step."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from engine.nvtx_ranges import NvtxRanges


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
    gpu_ms: float = math.nan


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
