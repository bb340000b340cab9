"""Attention over the paged KV cache: the shared inner loop, and decode.

Decode: one query token per sequence. A program owns one (sequence, KV head, context partition) and
serves all the query heads sharing that KV head, so each K/V block is read from memory once per KV
head rather than once per query head. A sequence's KV heads are neighbours in the grid, so programs
running together read whole token rows of a block, not one head's 256 bytes of each. Long contexts
are split into partitions processed in parallel and merged by a second small kernel using each
partition's log-sum-exp.
Prefill lives in kernels/prefill_attention.py. Both work in base 2 (exp2), log2(e) folded into the scale.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl
from llmbench.kernels import pdl
from llmbench.kernels.pdl import wait_for_previous_kernel

LOG2E = 1.4426950408889634
MIN_PARTITION = 128  # tokens: below this a split costs more in merging than it gains in parallelism
PROGRAMS_PER_SM = 4  # decode programs that run concurrently on one multiprocessor (one full wave)
# launch parameters, tuned on an H200 for Llama-3-8B heads (see docs/measurements/h200/kernels.json)
DECODE_LAUNCH = {"block_n": 64, "num_warps": 4, "num_stages": 3}
# A grid of at least MANY_PROGRAMS_PER_SM programs per multiprocessor (256 sequences of 8 KV heads on an
# H200: 15.5) takes smaller tiles, a third of the shared memory a program, so more of them stay resident.
# Measured in the engine's 32-layer graph (docs/measurements/h200/decode_layer_probe.json,
# decode_launch_choice.json):
# at 256 sequences 3-10% faster at contexts of 256-512 tokens, as fast at 1024; at 192 (11.6 a
# multiprocessor) 5-10% slower, at 128 mixed, at 64 and below slower. The throughput workload, at 256
# sequences, gained 0.9% in three interleaved pairs (docs/measurements/h200/throughput_ab/).
DECODE_LAUNCH_MANY = {"block_n": 32, "num_warps": 2, "num_stages": 2}
MANY_PROGRAMS_PER_SM = 15


@triton.jit
def _online_softmax_step(q, k, v, acc, m, denom, qk_scale, mask):
    s = tl.dot(q, tl.trans(k)) * qk_scale
    s = tl.where(mask, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    denom = denom * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, denom


@triton.jit
def _paged_offsets(
    block_table_row, offs_n, mask_n, kv_head_offset, offs_d, stride_block, stride_row, BLOCK_SIZE
):
    blocks = tl.load(block_table_row + offs_n // BLOCK_SIZE, mask=mask_n, other=0).to(tl.int64)
    rows = offs_n % BLOCK_SIZE
    return blocks[:, None] * stride_block + rows[:, None] * stride_row + kv_head_offset + offs_d[None, :]


# Block-table width and split count vary between batches: no recompiles on their divisibility.
@triton.jit(do_not_specialize=["stride_table", "partition_size", "num_splits"])
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,
    stride_q_seq,
    stride_q_head,
    stride_block,
    stride_row,
    stride_head,
    stride_table,
    stride_out_seq,
    stride_out_head,
    partition_size,
    num_splits,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    kv_head = tl.program_id(0)
    seq = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    lo = split * partition_size
    hi = tl.minimum(lo + partition_size, seq_len)

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + offs_g
    mask_g = offs_g < GROUP
    q = tl.load(
        q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + offs_d[None, :],
        mask=mask_g[:, None],
        other=0.0,
    )
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    block_table_row = block_tables_ptr + seq * stride_table
    kv_head_offset = kv_head.to(tl.int64) * stride_head
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < hi
        kv_offs = _paged_offsets(
            block_table_row, offs_n, mask_n, kv_head_offset, offs_d, stride_block, stride_row, BLOCK_SIZE
        )
        k = tl.load(k_cache_ptr + kv_offs, mask=mask_n[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_offs, mask=mask_n[:, None], other=0.0)
        acc, m, denom = _online_softmax_step(q, k, v, acc, m, denom, qk_scale, mask_n[None, :])

    # an empty partition (or a padding sequence of length 0) yields zeros and weight 0, never NaN
    safe_denom = tl.where(denom > 0, denom, 1.0)
    out = acc / safe_denom[:, None]
    if SPLIT:
        part = (seq * tl.num_programs(0) * GROUP + heads) * num_splits + split
        tl.store(part_out_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], out, mask=mask_g[:, None])
        tl.store(part_lse_ptr + part, m + tl.log2(safe_denom), mask=mask_g)
    else:
        out_ptrs = out_ptr + seq * stride_out_seq + heads[:, None] * stride_out_head + offs_d[None, :]
        tl.store(out_ptrs, out, mask=mask_g[:, None])


@triton.jit
def _merge_partitions_kernel(
    part_out_ptr,
    part_lse_ptr,
    seq_lens_ptr,
    out_ptr,
    stride_out_seq,
    stride_out_head,
    partition_size,
    num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    mask_s = offs_s < tl.cdiv(seq_len, partition_size)
    row = (seq * tl.num_programs(1) + head) * num_splits + offs_s
    lse = tl.load(part_lse_ptr + row, mask=mask_s, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    weights = tl.exp2(lse - tl.where(lse_max > float("-inf"), lse_max, 0.0))
    parts = tl.load(part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], mask=mask_s[:, None], other=0.0)
    out = tl.sum(weights[:, None] * parts, 0) / tl.maximum(tl.sum(weights, 0), 1e-30)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + offs_d, out)


@functools.lru_cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def _decode_partitions(
    batch: int, num_kv_heads: int, max_context: int, device: torch.device
) -> tuple[int, int]:
    """(num_splits, partition_size) from shapes alone, so the launch needs no host sync and a CUDA graph
    can capture it. Split until the grid nears PROGRAMS_PER_SM per multiprocessor, never past it: on an
    H200 a grid just over one full wave ran 10-20% slower than one just under it."""
    wanted = (PROGRAMS_PER_SM * _num_sms(device)) // (batch * num_kv_heads)
    num_splits = max(1, min(wanted, max_context // MIN_PARTITION))
    partition = math.ceil(max_context / num_splits)
    return math.ceil(max_context / partition), partition


def _decode_launch(num_programs: int, device: torch.device) -> dict:
    many = num_programs >= MANY_PROGRAMS_PER_SM * _num_sms(device)
    return DECODE_LAUNCH_MANY if many else DECODE_LAUNCH


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """q [B, Hq, D] against each sequence's first seq_lens[b] cached tokens -> [B, Hq, D], written to
    `out` when given (rows of a larger output: no copy afterwards). num_splits overrides the
    context-partition heuristic (tests and benchmarks)."""
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q) if out is None else out
    if batch == 0:
        return out
    max_context = block_tables.shape[1] * block_size
    if num_splits is None:
        num_splits, partition = _decode_partitions(batch, num_kv_heads, max_context, q.device)
    else:
        partition = math.ceil(max_context / num_splits)
    launch = _decode_launch(batch * num_kv_heads * num_splits, q.device)
    block_n = launch["block_n"]
    partition = triton.cdiv(partition, block_n) * block_n
    num_splits = triton.cdiv(max_context, partition)
    group = num_heads // num_kv_heads
    split = num_splits > 1
    part_out = part_lse = out
    if split:
        part_out = torch.empty((batch, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((batch, num_heads, num_splits), dtype=torch.float32, device=q.device)
    _decode_kernel[(num_kv_heads, batch, num_splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        out,
        part_out,
        part_lse,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        partition,
        num_splits,
        GROUP=group,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        BLOCK_N=block_n,
        SPLIT=split,
        num_warps=launch["num_warps"],
        num_stages=launch["num_stages"],
        **pdl.launch_args(q.device),
    )
    if split:
        _merge_partitions_kernel[(batch, num_heads)](
            part_out,
            part_lse,
            seq_lens,
            out,
            out.stride(0),
            out.stride(1),
            partition,
            num_splits,
            HEAD_DIM=head_dim,
            BLOCK_S=triton.next_power_of_2(num_splits),
            **pdl.launch_args(part_out.device),
        )
    return out
