"""Per-step measurements. One StepRecord per engine step; its fields are the columns of steps.csv,
so they stay flat scalars. Host phases are timed with perf_counter laps, a handful per step."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


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
    """Milliseconds between consecutive laps, starting at construction."""

    __slots__ = ("start", "last")

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def lap_ms(self) -> float:
        now = time.perf_counter()
        elapsed = (now - self.last) * 1e3
        self.last = now
        return elapsed
