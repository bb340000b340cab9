"""What the scheduler hands the model runner for one step: a token budget spread over sequences.
A prefill chunk and a decode are the same thing here, a run of new tokens after the ones whose
KV is already cached."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmbench.engine.request import SamplingParams


# Slotted, as SamplingParams: every step reads each running sequence's entry and parameters, and after
# a wait for the GPU those reads come from cold caches. Slots keep an object's fields in the object, one
# memory block instead of two (the instance and its __dict__). On the H200 host the null executor's
# step after 9 ms forwards fell by 7.5-13.5% in three interleaved pairs
# (docs/measurements/h200/slotted_entries/).
@dataclass(slots=True)
class ScheduledSeq:
    """One sequence's part of a step. The scheduler refills each sequence's two entries in turn, so
    an entry holds until that sequence's next-but-one step is scheduled."""

    seq_id: int
    token_ids: list[int]  # the sequence's tokens so far (prompt + outputs); read, never mutated
    num_computed: int  # tokens whose K/V is already in the cache: the first new token's position
    num_new: int  # tokens to run this step (a prompt chunk, or 1 for a decode)
    # KV blocks covering at least num_computed + num_new tokens; the sequence's own list, only ever
    # appended to while it holds it (input preparation keeps a copy and writes just the new blocks)
    block_table: list[int]
    sampling: SamplingParams
    sample: bool  # False for a prompt chunk that does not reach the prompt's end
    num_outputs: int = 0  # tokens generated so far, for min_tokens and per-request seeds

    @property
    def seq_len(self) -> int:
        return self.num_computed + self.num_new


@dataclass
class ScheduledBatch:
    seqs: list[ScheduledSeq]
    num_steps: int = 1  # multi-step: decode-only batches run this many forwards per schedule
    # overlapped steps: decodes whose input token is still on the device, sampled by the step in flight.
    # Token row feed_rows[i] takes column feed_cols[i] of feed_tokens' last row.
    feed_rows: list[int] = field(default_factory=list)
    feed_cols: list[int] = field(default_factory=list)
    feed_tokens: object = None  # torch.Tensor [num_steps, n_sample] of the step in flight

    # list comprehensions, not generators: half the cost at hundreds of sequences, on every step

    @property
    def num_tokens(self) -> int:
        return sum([s.num_new for s in self.seqs])

    # A decode is one new token that is sampled, after outputs. A recomputed sequence's one-token
    # chunk samples nothing: it is prefill work, and must not get a multi-step window.

    @property
    def num_decode_seqs(self) -> int:
        return len([s for s in self.seqs if s.num_new == 1 and s.sample and s.num_outputs])

    @property
    def is_decode_only(self) -> bool:
        return self.num_decode_seqs == len(self.seqs)

    def context_and_pairs(self, num_tokens: int, num_prefill_tokens: int) -> tuple[int, int]:
        """Tokens attention reads this step (cached + new) and its causal (query, key) pairs: a
        sequence's length, plus (n - 1)(2p + n) / 2 for a chunk of n after p cached (an integer). The
        chunks are found by a filter, 3 us at 255 decodes and 1 chunk."""
        context = sum([s.num_computed for s in self.seqs]) + num_tokens
        if not num_prefill_tokens:
            return context, context
        chunks = [(s.num_new - 1) * (2 * s.num_computed + s.num_new) for s in self.seqs if s.num_new > 1]
        return context, context + sum(chunks) // 2
