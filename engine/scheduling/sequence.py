"""Per-request state inside the engine. A sequence keeps its token list and block table for its
whole life, so each step only moves counters instead of rebuilding lists."""

from __future__ import annotations

from enum import Enum

from llmbench.engine.request import FinishReason, SamplingParams


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    __slots__ = (
        "seq_id",
        "request_id",
        "params",
        "max_len",
        "arrival_time",
        "token_ids",
        "num_prompt_tokens",
        "num_computed",
        "block_table",
        "block_hashes",
        "num_cached_blocks",
        "num_cached_tokens",
        "num_pending",
        "pending_col",
        "t_scheduled",
        "status",
        "finish_reason",
        "entries",
        "entry_turn",
    )

    def __init__(
        self,
        seq_id: int,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
    ):
        self.seq_id = seq_id
        self.request_id = request_id
        self.params = params
        self.max_len = len(prompt_token_ids) + params.max_tokens  # longest it can grow: prompt + outputs
        self.arrival_time = arrival_time
        self.token_ids = list(prompt_token_ids)  # prompt, then outputs appended in place
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed = 0  # tokens whose K/V is in the cache
        self.block_table: list[int] = []
        self.block_hashes: list[bytes] = []  # chained key of each full block, kept across preemption
        self.num_cached_blocks = 0  # leading full blocks already offered to the prefix cache
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache on first admission
        # trailing token_ids that are placeholders: scheduled, sampled on the device, not yet read back
        self.num_pending = 0
        self.pending_col = 0  # this sequence's column in the sampled tokens of the step in flight
        self.t_scheduled: float | None = None
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        # the scheduler's two ScheduledSeq of this sequence, refilled in turn
        # (engine/scheduling/scheduler.py _add)
        self.entries: list = [None, None]
        self.entry_turn = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_outputs(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def known_output_ids(self) -> list[int]:
        """Outputs read back so far, placeholders left out."""
        return self.token_ids[self.num_prompt_tokens : len(self.token_ids) - self.num_pending]

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, tokens={self.num_tokens}, computed={self.num_computed}, "
            f"blocks={len(self.block_table)}, {self.status.value})"
        )
