"""Turn a ScheduledBatch into the model's tensors: flattened token ids and positions, where each new
token's K/V goes (slot mapping), and each sequence's block table, length and row range. Runs every step
with up to max_num_seqs sequences, so it is per-sequence list work plus a handful of tensor ops, never a
Python loop over tokens.

All integer inputs of a step are packed into one persistent host buffer (pinned on CUDA) and sent in a
single non-blocking copy to one persistent device buffer; the model's inputs are views of it. Slot
mapping is derived on the device."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.batch import ScheduledBatch
from engine.models.llama import AttentionMetadata

_ALIGN = 4  # int32 entries in 16 bytes


@dataclass
class ModelInput:
    input_ids: torch.Tensor  # [T] int32 or int64
    positions: torch.Tensor  # [T] int32 or int64
    attn: AttentionMetadata
    sample_rows: torch.Tensor  # [n_sample]: the row of each sampled sequence's last new token


def slot_mapping(
    block_tables: torch.Tensor, seq_index: torch.Tensor, positions: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Cache slot of each token: its sequence's block for that position, then the row in the block."""
    blocks = block_tables[seq_index, positions // block_size].long()
    return blocks * block_size + positions % block_size


class InputBuffers:
    """The persistent host and device buffers of one model runner. They grow (doubling) when a step
    needs more room, so after the first steps of each size no step allocates."""

    def __init__(self, block_size: int, device: torch.device, capacity: int = 1 << 14):
        self.block_size = block_size
        self.device = device
        self._pinned = device.type == "cuda"
        # the host buffer may only be refilled once the last step's copy has read it
        self._copied = torch.cuda.Event() if self._pinned else None
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self._host = torch.empty(capacity, dtype=torch.int32, pin_memory=self._pinned)
        self._host_np = self._host.numpy()
        self._device_buf = torch.empty(capacity, dtype=torch.int32, device=self.device)

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        seqs = batch.seqs
        num_seqs = len(seqs)
        input_ids: list[int] = []
        positions: list[int] = []
        seq_lens: list[int] = []
        query_start_loc = [0]
        for s in seqs:
            end = s.num_computed + s.num_new
            input_ids += s.token_ids[s.num_computed : end]
            positions += range(s.num_computed, end)
            seq_lens.append(end)
            query_start_loc.append(query_start_loc[-1] + s.num_new)
        max_blocks = max(len(s.block_table) for s in seqs)
        block_tables: list[int] = []
        for s in seqs:
            block_tables += s.block_table
            block_tables += [0] * (max_blocks - len(s.block_table))
        sample_rows = [query_start_loc[i + 1] - 1 for i, s in enumerate(seqs) if s.sample]

        # one host buffer, one copy: sections in this order, each starting on a 16-byte boundary (Triton
        # specializes kernels on pointer alignment: an unaligned view would compile a second variant
        # of a kernel mid-run, ~0.7 s on an H200, when the batch's shape shifts the sections; the padding
        # costs nothing measurable: prepare 0.086-0.099 ms a step at 256 sequences with or without it)
        sections = (input_ids, positions, seq_lens, query_start_loc, sample_rows, block_tables)
        padded = [-(-len(values) // _ALIGN) * _ALIGN for values in sections]
        starts = np.cumsum([0, *padded]).tolist()
        total = starts[-1]
        if self._copied is not None:
            self._copied.synchronize()
        if total > self._host.numel():
            self._allocate(max(total, 2 * self._host.numel()))
        for values, start in zip(sections, starts, strict=False):
            self._host_np[start : start + len(values)] = values
        device = self._device_buf[:total]
        device.copy_(self._host[:total], non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        ids_t, positions_t, seq_lens_t, query_start_t, sample_rows_t, tables_t = (
            device[start : start + len(values)] for values, start in zip(sections, starts, strict=False)
        )
        block_tables_t = tables_t.view(num_seqs, max_blocks)
        # slots are derived on the device: one gather instead of a Python loop over tokens
        seq_index = torch.repeat_interleave(query_start_t.diff(), output_size=len(positions))
        attn = AttentionMetadata(
            slot_mapping=slot_mapping(block_tables_t, seq_index, positions_t, self.block_size),
            block_tables=block_tables_t,
            seq_lens=seq_lens_t,
            query_start_loc=query_start_t,
            decode_only=batch.is_decode_only,
        )
        return ModelInput(ids_t, positions_t, attn, sample_rows_t)


def prepare_inputs(batch: ScheduledBatch, block_size: int, device: torch.device) -> ModelInput:
    """One step's inputs through throwaway buffers (tests and one-off forwards)."""
    return InputBuffers(block_size, device, capacity=1).prepare(batch)


def advance_decode(
    inputs: ModelInput, sampled: torch.Tensor, block_size: int, last_positions: torch.Tensor
) -> ModelInput:
    """The next forward of a multi-step decode batch, built on the device from the tokens just sampled:
    every sequence moves one position on (its block table already covers the extra tokens), but never
    past last_positions, its final output's position: a sequence that reaches max_tokens inside the
    window repeats that slot, whose tokens are dropped, instead of running past its reserved blocks."""
    attn = inputs.attn
    positions = torch.minimum(inputs.positions + 1, last_positions)
    seq_index = torch.arange(positions.shape[0], device=positions.device)
    next_attn = AttentionMetadata(
        slot_mapping=slot_mapping(attn.block_tables, seq_index, positions, block_size),
        block_tables=attn.block_tables,
        seq_lens=(positions + 1).to(attn.seq_lens.dtype),
        query_start_loc=attn.query_start_loc,
        decode_only=True,
    )
    return ModelInput(sampled, positions, next_attn, inputs.sample_rows)


def last_positions(batch: ScheduledBatch, inputs: ModelInput) -> torch.Tensor:
    """Multi-step: the position of each sequence's last possible output (prompt + max_tokens - 1)."""
    values = [s.seq_len - s.num_outputs + s.sampling.max_tokens - 1 for s in batch.seqs]
    return _send(values, inputs.positions)


def feed_sampled(batch: ScheduledBatch, inputs: ModelInput) -> None:
    """Async output: the decodes whose input token was still unknown at scheduling take it from
    the sampled tokens of the step before, on the device, without a host round trip."""
    index = _send([batch.feed_rows, batch.feed_cols], inputs.input_ids).long()
    rows, cols = index
    inputs.input_ids[rows] = batch.feed_tokens[-1, cols].to(inputs.input_ids.dtype)


def _send(values: list, like: torch.Tensor) -> torch.Tensor:
    """A small host list on like's device and dtype; pinned on CUDA so the copy never blocks."""
    host = torch.tensor(values, dtype=like.dtype)
    if like.is_cuda:
        host = host.pin_memory()
    return host.to(like.device, non_blocking=True)
