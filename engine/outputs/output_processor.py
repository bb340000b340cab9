"""After a step's tokens are read back: fill each sequence's placeholders with its sampled tokens,
decide whether it stopped, and turn the step into its StepOutputs. A multi-step window gives each
sequence several tokens, emitted as one chunk, or forward by forward when streamed; tokens after a
stop are dropped. A plain decode (one more token of a request that goes on) is two list entries of
the step's StepOutputs, not an object. Finished sequences give their blocks back here."""

from __future__ import annotations

import time

from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams, StepOutputs
from llmbench.engine.scheduling.scheduler import Scheduler, SchedulerOutput
from llmbench.engine.scheduling.sequence import Sequence, SequenceStatus

_FINISHED = SequenceStatus.FINISHED
_RUNNING = SequenceStatus.RUNNING


class OutputProcessor:
    def __init__(self, scheduler: Scheduler, eos_token_id: int | None):
        self.scheduler = scheduler
        self.block_manager = scheduler.block_manager
        self.eos_token_id = eos_token_id

    def process(
        self, scheduled: SchedulerOutput, sampled: list[list[int]], first_forward: int = 0
    ) -> tuple[StepOutputs, list[Sequence]]:
        """Outputs of one step (or of some of a window's forwards, from first_forward on) and the
        sequences they finished. `sampled` holds one row per forward, one token per sampling
        sequence in batch order."""
        now = time.perf_counter()
        one_row = len(sampled) == 1
        entries = scheduled.batch.seqs
        # one per sampling sequence: its token, or its tokens of these forwards
        columns = (sampled[0] if one_row else list(zip(*sampled, strict=True))) if sampled else []
        if len(columns) != len(entries):  # some entries are prompt chunks that sample nothing
            it = iter(columns)
            columns = [next(it) if entry.sample else None for entry in entries]
        outputs: list[RequestOutput] = []
        decode_ids: list[str] = []
        decode_tokens: list[int] = []
        finished: list[Sequence] = []
        eos = self.eos_token_id
        block_size = self.block_manager.block_size
        # bound once: this loop runs for every running sequence each step
        emit, emit_id, emit_token = outputs.append, decode_ids.append, decode_tokens.append
        for seq, entry, column in zip(scheduled.seqs, entries, columns, strict=True):
            # finished meanwhile: aborted, or stopped by the step before (async) and this token is extra
            if seq.status is _FINISHED:
                continue
            if column is None:
                if seq.num_computed >= (seq.num_cached_blocks + 1) * block_size:
                    self._cache_blocks(seq)
                continue  # a prompt chunk short of the prompt's end produces no token
            params = entry.sampling
            num_before = entry.num_outputs + first_forward
            # a sequence still running got a placeholder for each of these forwards up to its last output
            if one_row:
                tokens, num_kept = [column], 1
            else:
                tokens = list(column[: params.max_tokens - num_before])
                num_kept = len(tokens)
            # hot path: most tokens can stop nothing, which a few checks settle without a call
            reason = None
            if (
                params.stop_token_ids
                or not (params.ignore_eos or eos not in tokens)
                or num_before + num_kept >= params.max_tokens
            ):
                num_kept, reason = self._stop(tokens, num_before, params)
            first = entry.num_computed + entry.num_new + first_forward  # where these placeholders start
            token_ids = seq.token_ids
            if num_kept == 1:
                token_ids[first] = tokens[0]
            else:
                token_ids[first : first + num_kept] = tokens[:num_kept]
            if reason is None:
                seq.num_pending -= num_kept
                if seq.num_computed >= (seq.num_cached_blocks + 1) * block_size:
                    self._cache_blocks(seq)
                if one_row and num_before:  # a plain decode
                    emit_id(seq.request_id)
                    emit_token(column)
                    continue
            else:
                del tokens[num_kept:]
                self._finish(seq, first + num_kept, reason)
                finished.append(seq)
            # positional: half the cost of keywords, which shows at hundreds of outputs per step
            emit(
                RequestOutput(
                    seq.request_id,
                    tokens,
                    reason is not None,  # finished
                    reason,
                    None,  # error
                    now,  # t_emit
                    seq.t_scheduled,
                    seq.num_prompt_tokens,
                    seq.num_cached_tokens,
                    seq.output_token_ids if reason is not None else [],
                )
            )
        if finished:
            self.scheduler.finish(finished)
        return StepOutputs(outputs, decode_ids, decode_tokens, now), finished

    def _stop(
        self, tokens: list[int], num_before: int, params: SamplingParams
    ) -> tuple[int, FinishReason | None]:
        """How many of `tokens` (consecutive outputs after num_before others) are kept, and why the
        sequence finished after them, if it did."""
        eos = None if params.ignore_eos else self.eos_token_id
        stop_ids = params.stop_token_ids
        if eos in tokens or (stop_ids and not set(stop_ids).isdisjoint(tokens)):
            for i, token in enumerate(tokens):
                if (token == eos or token in stop_ids) and num_before + i + 1 >= params.min_tokens:
                    return i + 1, FinishReason.STOP
        if num_before + len(tokens) >= params.max_tokens:
            return len(tokens), FinishReason.LENGTH
        return len(tokens), None

    def _finish(self, seq: Sequence, num_tokens: int, reason: FinishReason) -> None:
        """Drop the tokens after the stop (the window's rest, and the next step's if in flight)."""
        del seq.token_ids[num_tokens:]
        seq.num_pending = 0
        seq.finish_reason = reason
        if seq.status is _RUNNING:
            seq.num_computed = num_tokens - 1  # the forwards past the stop computed nothing kept
            self._cache_blocks(seq)

    def _cache_blocks(self, seq: Sequence) -> None:
        """Offer the blocks that became full to the prefix cache; only tokens read back count, since
        a block's hash covers its tokens."""
        if seq.status is not _RUNNING:
            return  # preempted while this step was in flight: its blocks are gone
        num_known = min(seq.num_computed, len(seq.token_ids) - seq.num_pending)
        if num_known >= (seq.num_cached_blocks + 1) * self.block_manager.block_size:
            self.block_manager.cache_full_blocks(seq, num_known)
