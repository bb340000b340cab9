"""Continuous batching: each step is a token budget spread over requests. Running sequences come
first (a decode is one token, an unfinished prompt continues with its next chunk), then waiting
ones are admitted while blocks, budget and the sequence limit allow. When blocks run out, the
newest running sequence is preempted and later recomputed from its tokens so far."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from engine.batch import ScheduledBatch, ScheduledSeq
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import Sequence, SequenceStatus


@dataclass
class SchedulerOutput:
    batch: ScheduledBatch
    seqs: list[Sequence]  # the engine-side sequence of each entry of batch.seqs, same order
    num_preempted: int


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.chunked_prefill
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last one is preempted first
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(ScheduledBatch([]), [], 0)
        preempted_before = self.num_preemptions
        budget = self.max_num_batched_tokens
        if self.chunked_prefill:
            budget = self._schedule_running(out, budget)
            if self.num_preemptions == preempted_before:
                self._admit_waiting(out, budget)
        else:
            # without chunking a prefill step carries no decodes: the stall this toggle shows
            self._admit_waiting(out, budget)
            if not out.seqs:
                self._schedule_running(out, budget)
        out.num_preempted = self.num_preemptions - preempted_before
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        running = self.running
        block_size = self.block_manager.block_size
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            num_new = min(len(seq.token_ids) - seq.num_computed, budget)
            num_tokens = seq.num_computed + num_new
            # most decodes still fit in their last block and skip the block manager
            if num_tokens > len(seq.block_table) * block_size and not self._allocate_or_preempt(
                seq, num_tokens
            ):
                break  # seq preempted itself: it was the newest, nothing runs after it
            _add(out, seq, num_new)
            budget -= num_new
            i += 1
        return budget

    def _allocate_or_preempt(self, seq: Sequence, num_tokens: int) -> bool:
        while not self.block_manager.allocate(seq, num_tokens):
            victim = self.running.pop()
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        # recompute later: keep the tokens (outputs included), drop the KV
        self.block_manager.free(seq)
        seq.num_computed = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        block_size = self.block_manager.block_size
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.block_manager.lookup_prefix(seq)
            num_computed = len(cached) * block_size
            num_new = seq.num_tokens - num_computed
            if self.chunked_prefill:
                num_new = min(num_new, budget)
            elif num_new > budget and out.seqs:
                break  # a whole prompt must fit; only a lone prompt may exceed the budget
            if not self.block_manager.allocate(seq, num_computed + num_new, cached):
                break
            self.waiting.popleft()
            if seq.t_scheduled is None:
                seq.t_scheduled = time.perf_counter()
                seq.num_cached_tokens = num_computed
            seq.num_computed = num_computed
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            _add(out, seq, num_new)
            budget -= num_new

    def finish(self, seqs: list[Sequence]) -> None:
        """Release finished sequences' blocks and drop them from the running list."""
        for seq in seqs:
            self.block_manager.free(seq)
            seq.status = SequenceStatus.FINISHED
        self.running = [seq for seq in self.running if seq.status is SequenceStatus.RUNNING]

    def abort(self, seq: Sequence) -> None:
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED


def _add(out: SchedulerOutput, seq: Sequence, num_new: int) -> None:
    num_tokens = len(seq.token_ids)
    # positional: half the cost of keywords, which shows at hundreds of sequences per step
    entry = ScheduledSeq(
        seq.seq_id,
        seq.token_ids,
        seq.num_computed,
        num_new,
        seq.block_table,
        seq.params,
        seq.num_computed + num_new == num_tokens,  # sample
        num_tokens - seq.num_prompt_tokens,  # num_outputs
    )
    out.batch.seqs.append(entry)
    out.seqs.append(seq)
