"""Rotary position embedding (rotate-half style, as in HF Llama), applied to q and k in one launch;
rope_and_write_kv also stores the rotated k and v straight into their paged cache slots."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from llmbench.kernels import pdl
from llmbench.kernels.pdl import wait_for_previous_kernel


@triton.jit
def _rotate_heads(
    x_row_ptr, out_row_ptr, stride_out_head, num_heads, cos, sin, HALF: tl.constexpr, BLOCK_H: tl.constexpr
):
    """Rotate the heads of one token's row (heads contiguous in the input, stride_out_head apart in the
    output)."""
    heads = tl.arange(0, BLOCK_H)
    offs = tl.arange(0, HALF)
    mask = heads[:, None] < num_heads
    first = x_row_ptr + heads[:, None] * (2 * HALF) + offs[None, :]
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    out_first = out_row_ptr + heads[:, None] * stride_out_head + offs[None, :]
    tl.store(out_first, x1 * cos - x2 * sin, mask=mask)
    tl.store(out_first + HALF, x2 * cos + x1 * sin, mask=mask)


@triton.jit
def _cos_sin(positions_ptr, cos_sin_ptr, token, stride_cos_sin, HALF: tl.constexpr):
    # one cos/sin row serves every head of this token
    pos = tl.load(positions_ptr + token)
    offs = tl.arange(0, HALF)
    cos = tl.load(cos_sin_ptr + pos * stride_cos_sin + offs).to(tl.float32)[None, :]
    sin = tl.load(cos_sin_ptr + pos * stride_cos_sin + HALF + offs).to(tl.float32)[None, :]
    return cos, sin


@triton.jit
def _rope_kernel(
    positions_ptr,
    q_ptr,
    k_ptr,
    q_out_ptr,
    k_out_ptr,
    cos_sin_ptr,
    stride_q,
    stride_k,
    stride_cos_sin,
    num_q_heads,
    num_kv_heads,
    HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HKV: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    token = tl.program_id(0).to(tl.int64)
    cos, sin = _cos_sin(positions_ptr, cos_sin_ptr, token, stride_cos_sin, HALF)
    q_out_row = q_out_ptr + token * num_q_heads * (2 * HALF)
    k_out_row = k_out_ptr + token * num_kv_heads * (2 * HALF)
    _rotate_heads(q_ptr + token * stride_q, q_out_row, 2 * HALF, num_q_heads, cos, sin, HALF, BLOCK_HQ)
    _rotate_heads(k_ptr + token * stride_k, k_out_row, 2 * HALF, num_kv_heads, cos, sin, HALF, BLOCK_HKV)


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotated copies of q [T, Hq*D] and k [T, Hkv*D] (rows may be strided views of a fused QKV output;
    the copies are contiguous). cos_sin_cache [max_pos, D] holds cos in its first D/2 columns, sin after."""
    num_tokens = q.shape[0]
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if num_tokens == 0:
        return q_out, k_out
    num_q_heads = q.shape[1] // head_dim
    num_kv_heads = k.shape[1] // head_dim
    _rope_kernel[(num_tokens,)](
        positions,
        q,
        k,
        q_out,
        k_out,
        cos_sin_cache,
        q.stride(0),
        k.stride(0),
        cos_sin_cache.stride(0),
        num_q_heads,
        num_kv_heads,
        HALF=head_dim // 2,
        BLOCK_HQ=triton.next_power_of_2(num_q_heads),
        BLOCK_HKV=triton.next_power_of_2(num_kv_heads),
        num_warps=4,
        **pdl.launch_args(q.device),
    )
    return q_out, k_out


@triton.jit
def _rope_write_kv_kernel(
    positions_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    q_out_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    cos_sin_ptr,
    stride_q,
    stride_k,
    stride_v,
    stride_cache_slot,
    stride_cache_head,
    stride_cos_sin,
    num_q_heads,
    num_kv_heads,
    HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HKV: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    token = tl.program_id(0).to(tl.int64)
    cos, sin = _cos_sin(positions_ptr, cos_sin_ptr, token, stride_cos_sin, HALF)
    q_out_row = q_out_ptr + token * num_q_heads * (2 * HALF)
    _rotate_heads(q_ptr + token * stride_q, q_out_row, 2 * HALF, num_q_heads, cos, sin, HALF, BLOCK_HQ)
    slot = tl.load(slot_mapping_ptr + token)
    # a negative slot marks a token whose K/V is not kept (as in write_kv)
    if slot >= 0:
        k_row = k_cache_ptr + slot * stride_cache_slot
        _rotate_heads(
            k_ptr + token * stride_k, k_row, stride_cache_head, num_kv_heads, cos, sin, HALF, BLOCK_HKV
        )
        heads = tl.arange(0, BLOCK_HKV)[:, None]
        offs_d = tl.arange(0, 2 * HALF)[None, :]
        mask = heads < num_kv_heads
        v = tl.load(v_ptr + token * stride_v + heads * (2 * HALF) + offs_d, mask=mask)
        v_row = v_cache_ptr + slot * stride_cache_slot
        tl.store(v_row + heads * stride_cache_head + offs_d, v, mask=mask)


def rope_and_write_kv(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """rotary_embedding then write_kv in one launch: returns the rotated q [T, Hq*D] (contiguous) and
    stores the rotated k and v [T, Hkv*D] at their cache slots, never materializing the rotated k."""
    num_tokens = q.shape[0]
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if num_tokens == 0:
        return q_out
    assert k_cache.stride() == v_cache.stride(), "k_cache and v_cache must share one layout"
    assert k_cache.stride(0) == k_cache.shape[1] * k_cache.stride(1), "cache blocks must be dense"
    num_q_heads = q.shape[1] // head_dim
    num_kv_heads = k.shape[1] // head_dim
    _rope_write_kv_kernel[(num_tokens,)](
        positions,
        q,
        k,
        v,
        q_out,
        k_cache,
        v_cache,
        slot_mapping,
        cos_sin_cache,
        q.stride(0),
        k.stride(0),
        v.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        cos_sin_cache.stride(0),
        num_q_heads,
        num_kv_heads,
        HALF=head_dim // 2,
        BLOCK_HQ=triton.next_power_of_2(num_q_heads),
        BLOCK_HKV=triton.next_power_of_2(num_kv_heads),
        num_warps=4,
        **pdl.launch_args(q.device),
    )
    return q_out
