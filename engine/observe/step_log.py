"""The engine's StepRecords, one a step. A record is made as its step ends, with the host phases' times
and the engine's counters of that moment. The batch's shape (decodes, prefill tokens, context tokens,
attention pairs), a pass over every scheduled sequence, is filled in while the next step is on the
device: a synchronous engine's device would otherwise idle for it. GPU times come last, once the step's
events have fired (engine/observe/timing.py GpuTimer)."""

from __future__ import annotations

from llmbench.engine.observe.timing import GpuTimer, StepRecord
from llmbench.engine.scheduling.batch import ScheduledBatch


class StepLog:
    def __init__(self, gpu_timer: GpuTimer | None):
        self.gpu_timer = gpu_timer
        self.last: StepRecord | None = None  # a split core adds its IPC time to it
        self._records: list[StepRecord] = []
        # the last record and the batch its shape comes from. A batch's entries hold until their
        # sequences' next-but-one step is scheduled (engine/scheduling/scheduler.py _add): read during the
        # next step, they are still this step's
        self._unmeasured: tuple[StepRecord, ScheduledBatch, int] | None = None
        # streamed hand-overs since the last step: when the first began, and their wait and output ms
        self._carried_start: float | None = None
        self._carried_ms = [0.0, 0.0]

    def carry(self, start: float, wait_ms: float, output_ms: float) -> None:
        """A streamed window's hand-over: its times go to the next step's record, which starts with
        the first hand-over."""
        if self._carried_start is None:
            self._carried_start = start
        self._carried_ms[0] += wait_ms
        self._carried_ms[1] += output_ms

    def add(self, record: StepRecord, batch: ScheduledBatch, num_tokens: int, span: object) -> None:
        """The record of the step just ended, its batch shape still zero; `span` is its GPU span, or
        None. Streamed hand-overs since the step before are added to it, and it starts with the first."""
        if self._carried_start is not None:
            record.t_start = self._carried_start
        record.sample_ms += self._carried_ms[0]
        record.output_ms += self._carried_ms[1]
        self._carried_start, self._carried_ms = None, [0.0, 0.0]
        self._records.append(record)
        self.last = record
        self._unmeasured = (record, batch, num_tokens)
        if span is not None:
            self.gpu_timer.track(span, record)

    def measure_batch(self) -> None:
        """The last record's batch shape: called once the next step is launched, or before a drain."""
        if self._unmeasured is None:
            return
        record, batch, num_tokens = self._unmeasured
        self._unmeasured = None
        record.num_decode_seqs = batch.num_decode_seqs
        record.num_prefill_tokens = num_tokens - record.num_decode_seqs  # a decode is one token
        record.num_context_tokens, record.num_attention_pairs = batch.context_and_pairs(
            num_tokens, record.num_prefill_tokens
        )

    def drain(self, idle: bool) -> list[StepRecord]:
        """Records so far, in step order, GPU times filled in. One whose GPU events have not fired
        stays, with every later one, for a later drain: draining never waits on a busy device, except
        in an idle engine (the end of a run or a phase), which has nothing to overlap."""
        self.measure_batch()
        records = self._records
        if self.gpu_timer is not None:
            self.gpu_timer.resolve(wait=idle)
            held = self.gpu_timer.oldest_unresolved()
            if held is not None:
                cut = held.step - records[0].step  # one record a step, drained from the front
                self._records = records[cut:]
                return records[:cut]
        self._records = []
        return records
