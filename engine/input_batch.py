"""Turn a ScheduledBatch into the model's tensors: flattened token ids and positions, where each new
token's K/V goes (slot mapping), and each sequence's block table, length and row range. Runs every step
with up to max_num_seqs sequences, so it is per-sequence list work plus a handful of tensor ops, never a
Python loop over tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.batch import ScheduledBatch
from engine.models.llama import AttentionMetadata


@dataclass
class ModelInput:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    attn: AttentionMetadata
    sample_rows: torch.Tensor  # [n_sample] int64: the row of each sampled sequence's last new token


def slot_mapping(
    block_tables: torch.Tensor, seq_index: torch.Tensor, positions: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Cache slot of each token: its sequence's block for that position, then the row in the block."""
    blocks = block_tables[seq_index, positions // block_size].long()
    return blocks * block_size + positions % block_size


def prepare_inputs(batch: ScheduledBatch, block_size: int, device: torch.device) -> ModelInput:
    seqs = batch.seqs
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

    def to_device(values: list[int], dtype: type) -> torch.Tensor:
        # through numpy: converting Python ints is several times faster than torch.tensor(list)
        return torch.from_numpy(np.array(values, dtype=dtype)).to(device, non_blocking=True)

    positions_t = to_device(positions, np.int64)
    block_tables_t = to_device(block_tables, np.int32).view(len(seqs), max_blocks)
    query_start_t = to_device(query_start_loc, np.int32)
    seq_lens_t = to_device(seq_lens, np.int32)
    # slots are derived on the device: one gather instead of a Python loop over tokens
    seq_index = torch.repeat_interleave(query_start_t.diff().long(), output_size=len(positions))
    attn = AttentionMetadata(
        slot_mapping=slot_mapping(block_tables_t, seq_index, positions_t, block_size),
        block_tables=block_tables_t,
        seq_lens=seq_lens_t,
        query_start_loc=query_start_t,
        decode_only=batch.is_decode_only,
    )
    return ModelInput(to_device(input_ids, np.int64), positions_t, attn, to_device(sample_rows, np.int64))


def advance_decode(inputs: ModelInput, sampled: torch.Tensor, block_size: int) -> ModelInput:
    """The next forward of a multi-step decode batch, built on the device from the tokens just sampled:
    every sequence moves one position on (its block table already covers the extra tokens)."""
    attn = inputs.attn
    positions = inputs.positions + 1
    seq_index = torch.arange(positions.shape[0], device=positions.device)
    next_attn = AttentionMetadata(
        slot_mapping=slot_mapping(attn.block_tables, seq_index, positions, block_size),
        block_tables=attn.block_tables,
        seq_lens=attn.seq_lens + 1,
        query_start_loc=attn.query_start_loc,
        decode_only=True,
    )
    return ModelInput(sampled, positions, next_attn, inputs.sample_rows)
