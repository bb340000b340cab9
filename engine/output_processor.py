"""After a forward: advance each scheduled sequence, append its sampled token, decide whether it
stopped, and turn the step into RequestOutputs. Finished sequences give their blocks back here."""

from __future__ import annotations

import time

from engine.request import FinishReason, RequestOutput
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence


class OutputProcessor:
    def __init__(self, scheduler: Scheduler, eos_token_id: int | None):
        self.scheduler = scheduler
        self.block_manager = scheduler.block_manager
        self.eos_token_id = eos_token_id

    def process(
        self, scheduled: SchedulerOutput, sampled: list[list[int]]
    ) -> tuple[list[RequestOutput], list[Sequence]]:
        """Outputs of one step and the sequences it finished. `sampled` holds one row per
        forward, one token per sampling sequence in batch order."""
        now = time.perf_counter()
        tokens = iter(sampled[0]) if sampled else iter(())
        block_size = self.block_manager.block_size
        outputs: list[RequestOutput] = []
        finished: list[Sequence] = []
        for seq, entry in zip(scheduled.seqs, scheduled.batch.seqs, strict=True):
            seq.num_computed += entry.num_new
            if seq.num_computed >= (seq.num_cached_blocks + 1) * block_size:
                self.block_manager.cache_full_blocks(seq)
            if not entry.sample:
                continue  # a prompt chunk short of the prompt's end produces no token
            token = next(tokens)
            seq.token_ids.append(token)
            reason = self._finish_reason(seq, token)
            if reason is not None:
                seq.finish_reason = reason
                finished.append(seq)
            # positional: half the cost of keywords, which shows at hundreds of outputs per step
            outputs.append(
                RequestOutput(
                    seq.request_id,
                    [token],
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
        return outputs, finished

    def _finish_reason(self, seq: Sequence, token: int) -> FinishReason | None:
        params = seq.params
        num_outputs = len(seq.token_ids) - seq.num_prompt_tokens
        if num_outputs >= params.min_tokens and (
            (token == self.eos_token_id and not params.ignore_eos) or token in params.stop_token_ids
        ):
            return FinishReason.STOP
        if num_outputs >= params.max_tokens:
            return FinishReason.LENGTH
        return None
