"""The packed layout of one step's integer inputs (token ids, positions, lengths, row offsets, sampled
rows, block tables, slots, async feed), and the model inputs (ModelInput, and the AttentionMetadata
each forward's attention reads) as views of a buffer in that layout. Input
preparation fills it on the host; the device copy is what the model reads, and what rank 0 of a
tensor-parallel group broadcasts for the other ranks to unpack."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from llmbench.kernels.attention_split import AttentionSplit

_ALIGN = 4  # int32 entries in 16 bytes


def padded(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


@dataclass
class AttentionMetadata:
    """Where each new token's K/V goes and what each sequence attends to, for one forward."""

    slot_mapping: torch.Tensor  # [T] int64
    block_tables: torch.Tensor  # [B, max_blocks] int32, padded with 0
    seq_lens: torch.Tensor  # [B] int32, tokens in the cache after this forward
    query_start_loc: torch.Tensor  # [B + 1] int32, row offsets of each sequence's new tokens
    decode_only: bool  # one new token per sequence: the decode kernel applies
    # a mixed or prefill step's split between the decode kernel, SDPA on a prompt's own K/V and the
    # paged prefill kernel (planned once per forward); None: one kernel serves the whole step
    split: AttentionSplit | None = None


@dataclass
class ModelInput:
    input_ids: torch.Tensor  # [T] int32 or int64
    positions: torch.Tensor  # [T] int32
    attn: AttentionMetadata
    sample_rows: torch.Tensor  # [n_sample]: the row of each sampled sequence's last new token
    # multi-step: positions and attention metadata of the window's later forwards
    later: list[tuple[torch.Tensor, AttentionMetadata]] = field(default_factory=list)
    # a single-step decode's input ids, positions and lengths as one [3, n] view of the packed
    # buffer: a graph's static inputs take them in one copy
    decode_rows: torch.Tensor | None = None
    # a single-step batch's row offsets [B + 1] and lengths [B] on the host, where input preparation
    # computed them: a prefill split is planned from these without reading the device back
    host_lens: tuple[np.ndarray, np.ndarray] | None = None
    # equal for two steps whose block tables are equal (BlockTables.version); None: unknown
    tables_version: int | None = None

    def next_forward(self, step: int, sampled: torch.Tensor) -> ModelInput:
        """Forward `step` (>= 1) of a multi-step window: its input tokens are those just sampled."""
        positions, attn = self.later[step - 1]
        return ModelInput(sampled, positions, attn, self.sample_rows, tables_version=self.tables_version)


class StepLayout(NamedTuple):
    """Everything needed to find one step's tensors in its packed buffer: with it, another tensor-
    parallel rank rebuilds the model inputs from the buffer alone."""

    num_seqs: int
    num_tokens: int
    num_steps: int
    width: int  # block table entries per sequence
    num_sample: int
    num_feed: int
    decode_only: bool

    def sections(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Each section's size and start, in int32 entries; the last start is the buffer's size. Each
        section starts on a 16-byte boundary, and so does each forward's row of a window (Triton
        specializes kernels on pointer alignment: an unaligned view would compile a second variant of
        a kernel mid-run, ~0.7 s on an H200, when the batch's shape shifts the sections)."""
        return _sections(self)


@functools.lru_cache(maxsize=256)  # a steady decode asks for the same layout's every step
def _sections(layout: StepLayout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n, t, k = layout.num_seqs, layout.num_tokens, layout.num_steps
    sizes = (t, k * padded(t), k * padded(n), n + 1, layout.num_sample, n * layout.width)
    sizes += (2 * k * padded(t), layout.num_feed, layout.num_feed)
    return sizes, tuple(itertools.accumulate((padded(size) for size in sizes), initial=0))


def unpack(packed: torch.Tensor, layout: StepLayout) -> tuple[ModelInput, torch.Tensor, torch.Tensor]:
    """The model inputs as views of a step's packed buffer, and the async-output feed rows and
    columns."""
    n, num_tokens, num_steps, width = layout.num_seqs, layout.num_tokens, layout.num_steps, layout.width
    sizes, starts = layout.sections()
    ids, positions, seq_lens, query_start, sample_rows, tables, slots, feed_rows, feed_cols = (
        packed[start : start + size] for start, size in zip(starts, sizes, strict=False)
    )
    slots = slots.view(torch.int64)
    tables = tables.view(n, width)
    decode_only = layout.decode_only
    if num_steps == 1:
        attn = AttentionMetadata(slots[:num_tokens], tables, seq_lens[:n], query_start, decode_only)
        decode_rows = None
        if num_tokens == n:  # sections 0-2 are then three rows of row_n
            decode_rows = packed[: starts[3]].view(3, padded(n))[:, :n]
        inputs = ModelInput(ids, positions[:num_tokens], attn, sample_rows, decode_rows=decode_rows)
        return inputs, feed_rows, feed_cols
    # a window: one row per forward
    row_t, row_n = padded(num_tokens), padded(n)
    positions = positions.view(num_steps, row_t)[:, :num_tokens]
    seq_lens = seq_lens.view(num_steps, row_n)[:, :n]
    slots = slots.view(num_steps, row_t)[:, :num_tokens]
    attns = [
        AttentionMetadata(slots[k], tables, seq_lens[k], query_start, decode_only) for k in range(num_steps)
    ]
    later = [(positions[k], attns[k]) for k in range(1, num_steps)]
    return ModelInput(ids, positions[0], attns[0], sample_rows, later), feed_rows, feed_cols
