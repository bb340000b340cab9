"""The inner loop the paged attention kernels share (decode in kernels/attention.py, prefill in
kernels/prefill_attention.py): a tile of keys' K/V offsets in the paged cache, and the online-softmax
step over it, masked or, for a tile every query row sees whole, without masks."""

import triton
import triton.language as tl


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


@triton.jit
def _paged_offsets(
    block_table_row, offs_n, mask_n, kv_head_offset, offs_d, stride_block, stride_row, BLOCK_SIZE
):
    blocks = tl.load(block_table_row + offs_n // BLOCK_SIZE, mask=mask_n, other=0).to(tl.int64)
    rows = offs_n % BLOCK_SIZE
    return blocks[:, None] * stride_block + rows[:, None] * stride_row + kv_head_offset + offs_d[None, :]


@triton.jit
def _attend_whole_tiles(
    q, acc, m, denom, qk_scale, k_cache_ptr, v_cache_ptr, block_table_row, kv_head_offset, offs_d,
    stride_block, stride_row, start, end, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Keys start .. end - 1 of the paged cache, (end - start) a multiple of BLOCK_N, each seen by every
    query row: loaded and attended without masks."""
    for tile in range(start, end, BLOCK_N):
        offs_n = tile + tl.arange(0, BLOCK_N)
        in_range = offs_n < end  # all true; only the block ids' (few) loads are masked
        kv_offs = _paged_offsets(
            block_table_row, offs_n, in_range, kv_head_offset, offs_d, stride_block, stride_row, BLOCK_SIZE
        )
        k = tl.load(k_cache_ptr + kv_offs)
        v = tl.load(v_cache_ptr + kv_offs)
        acc, m, denom = _whole_tile_step(q, k, v, acc, m, denom, qk_scale)
    return acc, m, denom
