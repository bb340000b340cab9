"""The packed step inputs: right values, and every view 16-byte aligned whatever the batch's shape."""

import random

import pytest
import torch

from engine.batch import ScheduledBatch, ScheduledSeq
from engine.input_batch import InputBuffers
from engine.request import SamplingParams

BLOCK = 4


def mixed_batch(num_seqs: int, seed: int) -> ScheduledBatch:
    """Chunks of odd lengths at odd offsets, so the sections' natural boundaries fall anywhere."""
    rng = random.Random(seed)
    seqs = []
    for i in range(num_seqs):
        length = rng.randrange(1, 23)
        done = rng.randrange(0, length)
        table = [rng.randrange(0, 100) for _ in range(-(-length // BLOCK))]
        tokens = [rng.randrange(3, 500) for _ in range(length)]
        seqs.append(
            ScheduledSeq(i, tokens, done, length - done, table, SamplingParams(), sample=rng.random() < 0.7)
        )
    return ScheduledBatch(seqs)


@pytest.mark.parametrize("seed", range(6))
def test_views_are_aligned_and_hold_the_batch(seed):
    buffers = InputBuffers(BLOCK, torch.device("cpu"), capacity=8)
    for num_seqs in (1, 3, 5, 6, 7):
        batch = mixed_batch(num_seqs, seed * 10 + num_seqs)
        inputs = buffers.prepare(batch)
        attn = inputs.attn
        views = (inputs.input_ids, inputs.positions, attn.seq_lens, attn.query_start_loc, attn.block_tables)
        assert all(v.data_ptr() % 16 == 0 for v in views), [v.data_ptr() % 16 for v in views]
        seqs = batch.seqs
        assert inputs.input_ids.tolist() == [t for s in seqs for t in s.token_ids[s.num_computed :]]
        assert inputs.positions.tolist() == [p for s in seqs for p in range(s.num_computed, len(s.token_ids))]
        assert attn.seq_lens.tolist() == [len(s.token_ids) for s in seqs]
        ends = torch.tensor([s.num_new for s in seqs]).cumsum(0).tolist()
        assert attn.query_start_loc.tolist() == [0, *ends]
        assert inputs.sample_rows.tolist() == [end - 1 for s, end in zip(seqs, ends, strict=True) if s.sample]
        width = max(len(s.block_table) for s in seqs)
        assert attn.block_tables.tolist() == [
            s.block_table + [0] * (width - len(s.block_table)) for s in seqs
        ]
