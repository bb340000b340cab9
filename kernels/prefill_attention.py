"""Prefill attention over the paged KV cache: any number of new tokens per sequence (varlen), causal over
the sequence's whole cached K/V, a cached prefix and earlier chunks included, and the chunk itself
(already written). One launch serves chunked prefill and mixed prefill + decode batches.

Most of a long context's keys come before a query block's first query: their whole tiles run without
masks, and programs start with the query blocks that see the most keys. On an H200 that took B=1 new=8192
from 1,621-1,634 to 1,278-1,280 us, B=4 new=2048 from 472 to 373, B=8 new=512 cached=1536 from 391 to
328, and left chunks of 128-256 tokens as they were (docs/measurements/h200/prefill_kernel_ab.json)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from llmbench.kernels import pdl
from llmbench.kernels.attention import LOG2E, _online_softmax_step, _paged_offsets
from llmbench.kernels.pdl import wait_for_previous_kernel

# Launch parameters, tuned on an H200 for Llama-3-8B heads. block_m is the query tokens of a program;
# "grouped" gives a program every query head of one KV head (GQA), so each K/V tile it loads serves them
# all, instead of one query head per program. Grouped, in larger tiles, is faster where a query attends
# to many keys: 4.6-9.6% from 2,048 tokens of context (a long prompt, or a chunk after a cached prefix),
# and 9-19% slower on chunks of 128-512 tokens with nothing cached
# (docs/measurements/h200/prefill_launch_sweep_grouped.json). The batch's longest context, the block table's
# width, chooses without reading the device.
PREFILL_LAUNCH = {"grouped": False, "block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}
PREFILL_LAUNCH_LONG = {"grouped": True, "block_m": 64, "block_n": 64, "num_warps": 8, "num_stages": 3}
LONG_CONTEXT = 2048


@triton.jit
def _whole_tile_step(q, k, v, acc, m, denom, qk_scale):
    """_online_softmax_step for a tile of keys every query row sees: no mask to apply, the scale folded
    into the exponent's argument, and P V accumulated by the matrix unit into the rescaled acc instead
    of added to it afterwards (one pass over acc fewer)."""
    s = tl.dot(q, tl.trans(k))
    m_new = tl.maximum(m, tl.max(s, 1) * qk_scale)  # qk_scale > 0: the scaled max is the max scaled
    p = tl.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m - m_new)
    denom = denom * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_new, denom


# The batch size and block-table width change from step to step; specializing on them (divisibility
# by 16, equality to 1) would recompile the kernel in the middle of a run.
@triton.jit(do_not_specialize=["stride_table", "num_seqs"])
def _prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    out_ptr,
    qk_scale,
    stride_q_token,
    stride_q_head,
    stride_block,
    stride_row,
    stride_head,
    stride_table,
    stride_out_token,
    stride_out_head,
    num_seqs,
    GROUP: tl.constexpr,
    HEADS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    # The grid has T // BLOCK_M + B query blocks; sequence b owns those from query_start_loc[b] // BLOCK_M + b
    # on, which is always enough for its queries. Binary search finds this program's sequence. Blocks
    # are handed out last first: a sequence's later queries see more keys, and starting the longest
    # programs first leaves short ones, not long ones, for the last wave.
    pid = tl.num_programs(1) - 1 - tl.program_id(1)
    first_head = tl.program_id(0) * HEADS  # the program's HEADS query heads, all of one KV head
    lo = pid * 0
    hi = lo + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        owns = tl.load(query_start_loc_ptr + mid) // BLOCK_M + mid <= pid
        lo = tl.where(owns, mid, lo)
        hi = tl.where(owns, hi, mid - 1)
    seq = lo
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    q_block = pid - (q_start // BLOCK_M + seq)
    if q_block * BLOCK_M >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    cached = seq_len - q_len

    # BLOCK_M tokens x BLOCK_G heads of query rows, token-major: a token's heads are adjacent in q
    offs_r = tl.arange(0, BLOCK_M * BLOCK_G)
    offs_m = q_block * BLOCK_M + offs_r // BLOCK_G
    heads = first_head + offs_r % BLOCK_G
    offs_d = tl.arange(0, HEAD_DIM)
    mask_m = (offs_m < q_len) & (offs_r % BLOCK_G < HEADS)
    tokens = (q_start + offs_m).to(tl.int64)
    q = tl.load(
        q_ptr + tokens[:, None] * stride_q_token + heads[:, None] * stride_q_head + offs_d[None, :],
        mask=mask_m[:, None],
        other=0.0,
    )
    q_pos = cached + offs_m
    m = tl.full([BLOCK_M * BLOCK_G], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M * BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_M * BLOCK_G, HEAD_DIM], tl.float32)
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_table
    kv_head_offset = (first_head // GROUP).to(tl.int64) * stride_head

    # keys before this block's first query are visible to every row: whole tiles of them need no mask
    visible_to_all = cached + q_block * BLOCK_M
    whole_tiles_end = visible_to_all - visible_to_all % BLOCK_N
    for start in range(0, whole_tiles_end, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        in_tile = offs_n < whole_tiles_end  # all true; only the block ids' (few) loads are masked
        kv_offs = _paged_offsets(
            block_table_row, offs_n, in_tile, kv_head_offset, offs_d, stride_block, stride_row, BLOCK_SIZE
        )
        k = tl.load(k_cache_ptr + kv_offs)
        v = tl.load(v_cache_ptr + kv_offs)
        acc, m, denom = _whole_tile_step(q, k, v, acc, m, denom, qk_scale)

    # the rest, masked: a last partial tile of those keys, then the diagonal (this block's own queries)
    diagonal_end = tl.minimum(seq_len, visible_to_all + BLOCK_M)
    for start in range(whole_tiles_end, diagonal_end, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < diagonal_end
        kv_offs = _paged_offsets(
            block_table_row, offs_n, mask_n, kv_head_offset, offs_d, stride_block, stride_row, BLOCK_SIZE
        )
        k = tl.load(k_cache_ptr + kv_offs, mask=mask_n[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_offs, mask=mask_n[:, None], other=0.0)
        causal = (offs_n[None, :] <= q_pos[:, None]) & mask_n[None, :]
        acc, m, denom = _online_softmax_step(q, k, v, acc, m, denom, qk_scale, causal)

    out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
    out_ptrs = (
        out_ptr + tokens[:, None] * stride_out_token + heads[:, None] * stride_out_head + offs_d[None, :]
    )
    tl.store(out_ptrs, out, mask=mask_m[:, None])


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [T, Hq, D]; sequence b's queries are rows query_start_loc[b]:query_start_loc[b+1], at positions
    seq_lens[b] - q_len .. seq_lens[b] - 1, each attending causally to all of that sequence's cached K/V.
    Returns [T, Hq, D], written to `out` when given (rows of a larger output: no copy afterwards)."""
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q) if out is None else out
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0:
        return out
    launch = PREFILL_LAUNCH_LONG if block_tables.shape[1] * block_size >= LONG_CONTEXT else PREFILL_LAUNCH
    block_m = launch["block_m"]
    group = num_heads // num_kv_heads
    heads = group if launch["grouped"] else 1
    _prefill_kernel[(num_heads // heads, num_tokens // block_m + num_seqs)](
        q,
        k_cache,
        v_cache,
        block_tables,
        query_start_loc,
        seq_lens,
        out,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        num_seqs,
        GROUP=group,
        HEADS=heads,
        BLOCK_G=triton.next_power_of_2(heads),
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        BLOCK_N=launch["block_n"],
        num_warps=launch["num_warps"],
        num_stages=launch["num_stages"],
        **pdl.launch_args(q.device),
    )
    return out
