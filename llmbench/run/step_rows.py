"""A run's step records: drained from the backend in batches, written to steps.csv, and kept with their
trial for the summary. An in-process engine's batches are drained while a step is on the device (the
runner's work during poll's wait), so the file I/O costs a synchronous engine's device no idle time."""

from __future__ import annotations

import math
import time
from typing import Any

from llmbench.backends.base import Backend
from llmbench.run.result_files import ResultWriter

FLUSH_INTERVAL_S = 0.1  # a batch every ~10 steps: each drain and write is a short pause, the file current


class StepRows:
    def __init__(self, backend: Backend, writer: ResultWriter):
        self.backend, self.writer = backend, writer
        # with its trial, as steps.csv has it: the summary's GPU busy and idle figures take each
        # trial's span alone, never the time between trials
        self.rows: list[dict[str, Any]] = []
        self._last_flush = -math.inf

    def flush(self, trial: int) -> None:
        steps = self.backend.drain_step_records()
        self.writer.add_steps(steps, trial)
        self.rows.extend({**vars(s), "trial": trial} for s in steps)  # asdict would deep-copy each
        self._last_flush = time.perf_counter()

    def flush_if_due(self, trial: int) -> None:
        if time.perf_counter() - self._last_flush > FLUSH_INTERVAL_S:
            self.flush(trial)
