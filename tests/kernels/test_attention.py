"""Paged decode and prefill attention against the torch reference."""

import pytest
import torch
from llmbench.kernels import attention, prefill_attention, reference, triton_ops
from llmbench.kernels.attention import paged_decode_attention

from tests.kernels.paged_kv import DEVICE, FP32_TOL, random_paged_kv


def _decode_case(seq_lens, block_size, num_heads, num_kv_heads, head_dim, dtype=torch.float32):
    k_cache, v_cache, block_tables = random_paged_kv(seq_lens, block_size, num_kv_heads, head_dim, dtype)
    q = torch.randn(len(seq_lens), num_heads, head_dim, device=DEVICE).to(dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    return q, k_cache, v_cache, block_tables, lens, head_dim**-0.5


@pytest.mark.parametrize(
    "seq_lens,block_size,num_heads,num_kv_heads,head_dim",
    [
        ([1, 5, 17], 4, 4, 2, 16),  # GQA, contexts crossing block boundaries
        ([33, 16, 7], 16, 4, 4, 32),  # one query head per KV head
        ([70], 16, 8, 1, 16),  # all heads share one KV head; longer than one tile
    ],
)
def test_decode_matches_reference(seq_lens, block_size, num_heads, num_kv_heads, head_dim):
    args = _decode_case(seq_lens, block_size, num_heads, num_kv_heads, head_dim)
    torch.testing.assert_close(
        triton_ops.paged_decode_attention(*args),
        reference.paged_decode_attention(*args),
        atol=FP32_TOL,
        rtol=FP32_TOL,
    )


@pytest.mark.parametrize("num_splits", [2, 4])
def test_decode_split_context_merges_to_reference(num_splits):
    # partitions are tile-aligned (64 tokens): 200 tokens span several, 20 fit in the first alone
    args = _decode_case([200, 20, 130], 16, 4, 2, 16)
    torch.testing.assert_close(
        paged_decode_attention(*args, num_splits=num_splits),
        reference.paged_decode_attention(*args),
        atol=FP32_TOL,
        rtol=FP32_TOL,
    )


@pytest.mark.parametrize("many_programs_per_sm", [0, 10**9])  # each of the kernel's two launches
@pytest.mark.parametrize("num_splits", [None, 3])
def test_decode_both_launches_match_reference(monkeypatch, many_programs_per_sm, num_splits):
    monkeypatch.setattr(attention, "MANY_PROGRAMS_PER_SM", many_programs_per_sm)
    args = _decode_case([200, 20, 130, 1], 16, 8, 2, 16)
    torch.testing.assert_close(
        paged_decode_attention(*args, num_splits=num_splits),
        reference.paged_decode_attention(*args),
        atol=FP32_TOL,
        rtol=FP32_TOL,
    )


@pytest.mark.parametrize(
    "batch,splits,launch",
    [
        (256, 1, attention.DECODE_LAUNCH_MANY),  # 2048 programs: 15.5 a multiprocessor
        (192, 1, attention.DECODE_LAUNCH),  # 1536: 11.6, where the small tiles ran slower
        (64, 1, attention.DECODE_LAUNCH),
        (16, 4, attention.DECODE_LAUNCH),
    ],
)
def test_decode_takes_small_tiles_for_many_programs_on_an_h200_sized_gpu(monkeypatch, batch, splits, launch):
    monkeypatch.setattr(attention, "_num_sms", lambda device: 132)
    assert attention._decode_launch(batch * 8 * splits, torch.device("cuda")) is launch


@pytest.mark.parametrize("num_splits", [1, 2])
def test_decode_padding_sequence_of_length_zero_gives_zeros(num_splits):
    q, k_cache, v_cache, block_tables, lens, scale = _decode_case([150, 9], 16, 4, 2, 16)
    lens[1] = 0
    out = paged_decode_attention(q, k_cache, v_cache, block_tables, lens, scale, num_splits=num_splits)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    ref = reference.paged_decode_attention(q[:1], k_cache, v_cache, block_tables[:1], lens[:1], scale)
    torch.testing.assert_close(out[:1], ref, atol=FP32_TOL, rtol=FP32_TOL)


def _prefill_case(q_lens, cached_lens, block_size, num_heads, num_kv_heads, head_dim, dtype=torch.float32):
    seq_lens = [c + n for c, n in zip(cached_lens, q_lens, strict=True)]
    k_cache, v_cache, block_tables = random_paged_kv(seq_lens, block_size, num_kv_heads, head_dim, dtype)
    q = torch.randn(sum(q_lens), num_heads, head_dim, device=DEVICE).to(dtype)
    starts = torch.tensor([0, *q_lens], device=DEVICE).cumsum(0).int()
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    return q, k_cache, v_cache, block_tables, starts, lens, head_dim**-0.5


@pytest.mark.parametrize(
    "q_lens,cached_lens,block_size,num_heads,num_kv_heads",
    [
        ([5, 12, 3], [0, 0, 0], 4, 4, 2),  # plain varlen prefill
        ([9, 20], [11, 37], 16, 4, 2),  # chunks after a cached prefix / earlier chunks
        ([1, 70, 1, 6], [30, 5, 4, 0], 4, 4, 1),  # mixed: decodes next to prefill chunks, > one query tile
        ([3, 2], [62, 66], 16, 2, 2),  # chunks straddling the 64-key tile boundary
    ],
)
def test_prefill_matches_reference(q_lens, cached_lens, block_size, num_heads, num_kv_heads):
    args = _prefill_case(q_lens, cached_lens, block_size, num_heads, num_kv_heads, 16)
    torch.testing.assert_close(
        triton_ops.paged_prefill_attention(*args),
        reference.paged_prefill_attention(*args),
        atol=FP32_TOL,
        rtol=FP32_TOL,
    )


@pytest.mark.parametrize("grouped,block_m", [(False, 16), (True, 16), (True, 32)])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(8, 2), (12, 4), (4, 4)])  # groups of 4, 3 (padded), 1
def test_prefill_program_per_query_head_or_per_kv_head_matches_reference(
    monkeypatch, grouped, block_m, num_heads, num_kv_heads
):
    monkeypatch.setattr(prefill_attention, "LONG_CONTEXT", 10**9)  # PREFILL_LAUNCH, as set here
    monkeypatch.setitem(prefill_attention.PREFILL_LAUNCH, "grouped", grouped)
    monkeypatch.setitem(prefill_attention.PREFILL_LAUNCH, "block_m", block_m)
    # a chunk after a cached prefix spanning several query blocks, a fresh prompt, a one-token chunk
    args = _prefill_case([40, 5, 1], [17, 0, 33], 16, num_heads, num_kv_heads, 16)
    torch.testing.assert_close(
        triton_ops.paged_prefill_attention(*args),
        reference.paged_prefill_attention(*args),
        atol=FP32_TOL,
        rtol=FP32_TOL,
    )


@pytest.mark.parametrize("long_context", [0, 10**9])  # the long-context launch, or the default
def test_prefill_launch_for_long_contexts_matches_reference(monkeypatch, long_context):
    monkeypatch.setattr(prefill_attention, "LONG_CONTEXT", long_context)
    args = _prefill_case([70, 3], [30, 100], 16, 8, 2, 16)
    torch.testing.assert_close(
        triton_ops.paged_prefill_attention(*args),
        reference.paged_prefill_attention(*args),
        atol=FP32_TOL,
        rtol=FP32_TOL,
    )


def test_prefill_of_one_token_equals_decode():
    q, k_cache, v_cache, block_tables, starts, lens, scale = _prefill_case([1, 1], [40, 3], 4, 4, 2, 16)
    prefill = triton_ops.paged_prefill_attention(q, k_cache, v_cache, block_tables, starts, lens, scale)
    decode = triton_ops.paged_decode_attention(q, k_cache, v_cache, block_tables, lens, scale)
    torch.testing.assert_close(prefill, decode, atol=FP32_TOL, rtol=FP32_TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("seq_lens", [[2048] * 8, [1, 300, 4097, 17]])
def test_decode_bf16_llama_heads_on_gpu(seq_lens):
    args = _decode_case(seq_lens, 16, 32, 8, 128, torch.bfloat16)
    got, want = triton_ops.paged_decode_attention(*args), reference.paged_decode_attention(*args)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_prefill_bf16_llama_heads_on_gpu():
    args = _prefill_case([300, 1, 1000, 57], [0, 700, 512, 9], 16, 32, 8, 128, torch.bfloat16)
    torch.testing.assert_close(
        triton_ops.paged_prefill_attention(*args),
        reference.paged_prefill_attention(*args),
        atol=2e-2,
        rtol=2e-2,
    )


@pytest.mark.parametrize(
    "batch,context,splits",
    [
        (64, 2048, 1),  # 512 programs already fill an H200 (132 SMs x 4)
        (16, 8192, 4),  # 128 programs: split 4 ways, staying within one wave
        (32, 2048, 2),
        (1, 2048, 16),  # capped by the minimum partition of 128 tokens
    ],
)
def test_decode_split_heuristic_on_an_h200_sized_gpu(monkeypatch, batch, context, splits):
    monkeypatch.setattr(attention, "_num_sms", lambda device: 132)
    num_splits, partition = attention._decode_partitions(batch, 8, context, torch.device("cuda"))
    assert (num_splits, partition) == (splits, context // splits)
