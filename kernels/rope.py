"""Rotary position embedding (rotate-half style, as in HF Llama), applied to q and k in one launch."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    x_ptr, out_ptr, stride_token, token, num_heads, cos, sin, HALF: tl.constexpr, BLOCK_H: tl.constexpr
):
    heads = tl.arange(0, BLOCK_H)
    offs = tl.arange(0, HALF)
    mask = heads[:, None] < num_heads
    within_token = heads[:, None] * (2 * HALF) + offs[None, :]
    first = x_ptr + token * stride_token + within_token
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    out_first = out_ptr + token * num_heads * (2 * HALF) + within_token
    tl.store(out_first, x1 * cos - x2 * sin, mask=mask)
    tl.store(out_first + HALF, x2 * cos + x1 * sin, mask=mask)


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
):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + token)
    offs = tl.arange(0, HALF)
    # one cos/sin row serves every head of this token
    cos = tl.load(cos_sin_ptr + pos * stride_cos_sin + offs).to(tl.float32)[None, :]
    sin = tl.load(cos_sin_ptr + pos * stride_cos_sin + HALF + offs).to(tl.float32)[None, :]
    _rotate_heads(q_ptr, q_out_ptr, stride_q, token, num_q_heads, cos, sin, HALF, BLOCK_HQ)
    _rotate_heads(k_ptr, k_out_ptr, stride_k, token, num_kv_heads, cos, sin, HALF, BLOCK_HKV)


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
    )
    return q_out, k_out
