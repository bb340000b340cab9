"""Continuous batching: each step is a token budget spread over requests. Running sequences come
first (a decode is one token, an unfinished prompt continues with its next chunk), then waiting
ones are admitted while blocks, budget and the sequence limit allow. When blocks run out, the
newest running sequence is preempted and later recomputed from its tokens so far.

A step is scheduled before the previous one's outputs are processed (overlapped steps): `advance` moves
each scheduled sequence on with placeholder tokens, which output processing fills in later. With
multi-step scheduling, decode-only steps run num_scheduler_steps forwards, with KV blocks reserved
that far ahead once the batch is known to be decode-only."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from llmbench.engine.config import EngineConfig
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq
from llmbench.engine.scheduling.block_manager import BlockManager
from llmbench.engine.scheduling.sequence import Sequence, SequenceStatus


@dataclass
class SchedulerOutput:
    batch: ScheduledBatch
    seqs: list[Sequence]  # the engine-side sequence of each entry of batch.seqs, same order
    num_preempted: int
    num_tokens: int = 0  # token rows so far, while scheduling


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.chunked_prefill
        self.lookahead = config.num_scheduler_steps - 1  # extra decode tokens reserved per schedule
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
            # admit nothing in a step that preempted: a victim in the step in flight still holds
            # placeholders, and readmitted now it would prefill over tokens not yet read back
            if self.num_preemptions == preempted_before:
                self._admit_waiting(out, budget)
        else:
            # without chunking a prefill step carries no decodes: the stall this toggle shows
            self._admit_waiting(out, budget)
            if not out.seqs:
                self._schedule_running(out, budget)
        out.num_preempted = self.num_preemptions - preempted_before
        if self.lookahead and out.seqs and out.batch.is_decode_only:
            self._reserve_window(out)
        return out

    def _reserve_window(self, out: SchedulerOutput) -> None:
        """Blocks for every forward of a multi-step window, reserved only now that the batch is known
        to be decode-only: a sequence readmitted with a prefix hit that leaves one token is a decode
        too, though admission sized it for one step. Each forward writes one more KV slot, up to the
        sequence's last output. When the pool cannot hold every window the batch runs the longest
        window it can hold (one step needs no more blocks), instead of preempting sequences in it."""
        bm = self.block_manager
        block_size = bm.block_size
        # no longer than the most outputs any sequence has left: past that every token is dropped,
        # and the forwards would still hold the GPU (at the end of a load, before the next one)
        longest = max([seq.max_len - len(seq.token_ids) for seq in out.seqs])
        for window in range(min(self.lookahead + 1, longest), 1, -1):
            needed = []
            num_fresh = 0
            for seq in out.seqs:  # per sequence: a conditional, not min(), which costs 9x as much
                num_tokens = seq.num_computed + window
                if num_tokens > seq.max_len:
                    num_tokens = seq.max_len
                if num_tokens > len(seq.block_table) * block_size:
                    needed.append((seq, num_tokens))
                    num_fresh += bm.blocks_for(num_tokens) - len(seq.block_table)
            if num_fresh <= bm.num_free:
                for seq, num_tokens in needed:
                    bm.allocate(seq, num_tokens)
                out.batch.num_steps = window
                return

    def kv_tokens_needed(self, max_len: int) -> int:
        """KV slots a sequence of max_len tokens may occupy. The last token never enters the cache,
        but a multi-step window may run one forward past it (its output is dropped)."""
        return min(max_len - 1 + self.lookahead, max_len)

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        block_size = self.block_manager.block_size
        for seq in self.running:  # a preemption pops from the end: the loop never reaches a victim
            if budget <= 0:
                break
            num_tokens = len(seq.token_ids)
            if num_tokens >= seq.max_len:
                continue  # every output is scheduled (async): it finishes once they are read back
            num_computed = seq.num_computed
            num_new = num_tokens - num_computed
            if num_new > budget:  # min() here was a quarter of scheduling 256 decodes
                num_new = budget
            # most decodes still fit in their last block and skip the block manager
            if num_computed + num_new > len(seq.block_table) * block_size and not self._allocate_or_preempt(
                seq, num_computed + num_new
            ):
                break  # seq preempted itself: it was the newest, nothing runs after it
            _add(out, seq, num_new, num_tokens)
            budget -= num_new
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
            _add(out, seq, num_new, len(seq.token_ids))
            budget -= num_new

    def advance(self, out: SchedulerOutput) -> None:
        """Move the scheduled sequences past this step before its tokens are known: the computed
        count grows and each token to be sampled gets a placeholder, so the next step can be
        scheduled at once. Output processing fills the placeholders in."""
        num_steps = out.batch.num_steps
        col = 0
        for seq, entry in zip(out.seqs, out.batch.seqs, strict=True):
            if not entry.sample:
                seq.num_computed += entry.num_new
                continue
            if num_steps == 1:
                seq.num_computed += entry.num_new
                seq.token_ids.append(_PLACEHOLDER)
                seq.num_pending += 1
            else:
                # never more placeholders than outputs left: the window's later forwards are dropped
                num_sampled = entry.sampling.max_tokens - entry.num_outputs
                if num_sampled > num_steps:
                    num_sampled = num_steps
                seq.num_computed += entry.num_new + num_sampled - 1
                seq.token_ids += [_PLACEHOLDER] * num_sampled
                seq.num_pending += num_sampled
            seq.pending_col = col
            col += 1

    def finish(self, seqs: list[Sequence]) -> None:
        """Release finished sequences' blocks and drop them from the running (or, when preempted
        while their last step was in flight, the waiting) list."""
        for seq in seqs:
            self.block_manager.free(seq)
            if seq.status is SequenceStatus.WAITING:
                self.waiting.remove(seq)
            seq.status = SequenceStatus.FINISHED
        self.running = [seq for seq in self.running if seq.status is SequenceStatus.RUNNING]

    def abort(self, seq: Sequence) -> None:
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED


_PLACEHOLDER = 0  # any valid token id: the model runner overwrites it on the device


def _add(out: SchedulerOutput, seq: Sequence, num_new: int, num_tokens: int) -> None:
    num_computed = seq.num_computed
    if seq.num_pending:
        # a decode whose input token was sampled by the step still in flight. The feed replaces only
        # that one input: any other placeholder would run as token _PLACEHOLDER
        assert num_new == 1 and num_computed == num_tokens - 1, f"{seq}: {num_new} new with placeholders"
        out.batch.feed_rows.append(out.num_tokens)
        out.batch.feed_cols.append(seq.pending_col)
    out.num_tokens += num_new
    # Each sequence's two entries take turns: a step's entries are read until its outputs are
    # processed, which is before the sequence's next-but-one step is scheduled (the engine holds the
    # step in flight and the one it launches, no more). Refilling one costs a sixth of building it,
    # 9 against 57 us a step at 256 sequences.
    turn = seq.entry_turn = 1 - seq.entry_turn
    entry = seq.entries[turn]
    sample = num_computed + num_new == num_tokens
    if entry is None:
        # positional: half the cost of keywords
        entry = seq.entries[turn] = ScheduledSeq(
            seq.seq_id,
            seq.token_ids,
            num_computed,
            num_new,
            seq.block_table,
            seq.params,
            sample,
            num_tokens - seq.num_prompt_tokens,  # num_outputs
        )
    else:
        entry.num_computed, entry.num_new, entry.sample = num_computed, num_new, sample
        entry.num_outputs = num_tokens - seq.num_prompt_tokens
        entry.block_table = seq.block_table  # a preempted sequence gets a new list
    out.batch.seqs.append(entry)
    out.seqs.append(seq)
