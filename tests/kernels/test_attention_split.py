"""A step's attention split between SDPA (no-prefix sequences, on their own K/V), the decode kernel
(decodes) and the paged prefill kernel (the rest), against the torch reference's paged attention over the
whole step."""

import pytest
import torch
from llmbench.kernels import attention_split, reference, triton_ops

from tests.kernels.paged_kv import DECODE_STEP, FP32_TOL, plan_on_cpu, split_and_reference

MIXED_STEPS = [
    # equal-length prompts apart in the batch (gathered), a decode, a chunk after a cached prefix
    ([5, 7, 1, 5, 3, 1, 9], [0, 0, 10, 0, 4, 0, 0]),
    ([6, 6, 6], [0, 0, 0]),  # the whole step one group: no scatter, no paged launch
    ([2, 3, 4, 5, 6, 7, 1], [0, 0, 0, 0, 0, 0, 20]),  # six lengths: the two with least work stay paged
    ([1, 9, 9, 1], [30, 0, 0, 7]),  # decodes around adjacent equal prompts (one slice)
]


@pytest.mark.parametrize("q_lens,cached", MIXED_STEPS)
def test_split_matches_paged_reference(monkeypatch, q_lens, cached):
    monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)  # tiny prompts take the SDPA path too
    got, want = split_and_reference(reference, q_lens, cached)
    torch.testing.assert_close(got, want, atol=FP32_TOL, rtol=FP32_TOL)


def test_split_with_the_triton_paged_kernel_matches_reference(monkeypatch):
    monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)
    q_lens, cached = MIXED_STEPS[0]
    got, want = split_and_reference(triton_ops, q_lens, cached)
    torch.testing.assert_close(got, want, atol=FP32_TOL, rtol=FP32_TOL)


def test_plan_cuts_the_paged_tables_to_the_paged_sequences_longest():
    # eight decodes at up to 4,000 tokens go to the decode kernel; the chunks left to the paged kernel
    # reach 70 tokens, so its tables (and the launch it chooses by their width) cover 5 blocks of 16
    split = plan_on_cpu([1] * 8 + [20, 30], [4000 - 1] + [100] * 7 + [50, 0], prefill_attention="paged")
    assert split.decodes.block_tables.shape[1] == 250
    assert split.paged.block_tables.shape[1] == 5


def test_plan_groups_equal_lengths_and_leaves_the_rest_to_the_paged_kernel():
    # two 40-token prompts apart in the batch, a 64-token one, a decode, a chunk after 16 cached tokens
    split = plan_on_cpu([40, 64, 1, 40, 8], [0, 0, 30, 0, 16])
    assert [(g.length, g.count) for g in split.groups] == [(40, 2), (64, 1)]
    assert split.groups[0].rows.tolist() == list(range(40)) + list(range(105, 145))
    assert split.groups[1].rows == slice(40, 104)
    assert split.paged.rows.tolist() == [104, *range(145, 153)]
    assert split.paged.seq_lens.tolist() == [2, 4] and split.paged.query_start.tolist() == [0, 1, 9]


def test_plan_uses_views_for_adjacent_rows():
    split = plan_on_cpu([1, 1, 100, 100, 100], [9, 5, 0, 0, 0])
    assert [(g.length, g.count, g.rows) for g in split.groups] == [(100, 3, slice(2, 302))]
    assert split.paged.rows == slice(0, 2) and split.paged.seq_lens.tolist() == [0, 1]


def test_plan_sends_index_arrays_on_16_byte_boundaries():
    """Triton specializes the paged kernel on pointer alignment: an odd view would compile a variant."""
    split = plan_on_cpu([40, 3, 1, 40, 1, 2, 5], [0, 7, 9, 0, 4, 0, 11])
    sent = [split.groups[0].rows, split.paged.rows, split.paged.query_start]
    assert all(isinstance(t, torch.Tensor) and t.storage_offset() % 4 == 0 for t in sent)
    assert split.paged.seq_lens.tolist() == [1, 2, 4, 5, 6]
    assert split.paged.query_start.tolist() == [0, 3, 4, 5, 7, 12]


def test_plan_keeps_small_groups_and_all_prefixed_steps_paged():
    assert plan_on_cpu([30, 20, 1], [0, 0, 5]) is None  # no length reaches SDPA_MIN_TOKENS tokens
    assert plan_on_cpu([200, 300], [16, 64]) is None  # every chunk has a cached prefix
    split = plan_on_cpu([30, 20, 30, 1], [0, 0, 0, 5])  # two 30-token prompts: 60 tokens, still too few
    assert split is None
    split = plan_on_cpu([32, 20, 32, 1], [0, 0, 0, 5])
    assert [(g.length, g.count) for g in split.groups] == [(32, 2)]


def test_plan_caps_the_sdpa_calls_at_the_lengths_with_most_work():
    lengths = [100, 101, 102, 103, 104, 105]
    split = plan_on_cpu(lengths, [0] * 6)
    assert len(split.groups) == attention_split.SDPA_MAX_GROUPS == 4
    assert [g.length for g in split.groups] == [102, 103, 104, 105]
    assert split.paged.seq_lens.tolist() == [0, 1]


@pytest.mark.parametrize("prefill_attention", ["paged", "sdpa"])
@pytest.mark.parametrize("ops", [reference, triton_ops], ids=["reference", "triton"])
def test_decodes_split_from_a_mixed_step_match_the_paged_reference(monkeypatch, prefill_attention, ops):
    monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)
    got, want = split_and_reference(ops, *DECODE_STEP, prefill_attention=prefill_attention)
    torch.testing.assert_close(got, want, atol=FP32_TOL, rtol=FP32_TOL)


def test_plan_gives_decodes_to_the_decode_kernel_and_chunks_to_the_paged_one():
    split = plan_on_cpu(*DECODE_STEP, prefill_attention="paged")
    assert split.groups == [] and split.decodes.rows.tolist() == [*range(10), 24, 25]
    assert split.decodes.seq_lens.tolist() == [*range(10), 12, 13]
    assert split.paged.rows == slice(10, 24) and split.paged.seq_lens.tolist() == [10, 11]
    assert split.paged.query_start.tolist() == [0, 9, 14]


def test_plan_leaves_a_few_decodes_in_the_paged_launch():
    few = attention_split.DECODE_MIN_SEQS - 1
    assert plan_on_cpu([1] * few + [40], [5] * few + [16], prefill_attention="paged") is None
    split = plan_on_cpu([1] * (few + 1) + [40], [5] * (few + 1) + [16], prefill_attention="paged")
    assert split.decodes.seq_lens.tolist() == list(range(few + 1))
    assert split.paged.seq_lens.tolist() == [few + 1]


@pytest.mark.gpu
def test_split_bf16_llama_heads_on_gpu():
    """cuDNN (or flash) on Hopper against the reference, with grouped KV heads and mixed lengths."""
    shape = {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "block_size": 16, "dtype": torch.bfloat16}
    q_lens, cached = [512, 1, 300, 512, 57], [0, 700, 0, 0, 9]
    got, want = split_and_reference(triton_ops, q_lens, cached, **shape)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
