"""Write the K/V of this step's new tokens into their paged cache slots."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from llmbench.kernels import pdl
from llmbench.kernels.pdl import wait_for_previous_kernel


@triton.jit
def _write_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    stride_k_token,
    stride_k_head,
    stride_v_token,
    stride_v_head,
    stride_cache_block,
    stride_cache_row,
    stride_cache_head,
    num_kv_heads,
    block_size,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)
    # a negative slot marks a token whose K/V is not kept: nothing to store
    if slot < 0:
        return
    block = slot // block_size
    row = slot % block_size
    heads = tl.arange(0, BLOCK_H)[:, None]
    offs_d = tl.arange(0, HEAD_DIM)[None, :]
    mask = heads < num_kv_heads
    cache_offs = block * stride_cache_block + row * stride_cache_row + heads * stride_cache_head + offs_d
    k = tl.load(k_ptr + token * stride_k_token + heads * stride_k_head + offs_d, mask=mask)
    v = tl.load(v_ptr + token * stride_v_token + heads * stride_v_head + offs_d, mask=mask)
    tl.store(k_cache_ptr + cache_offs, k, mask=mask)
    tl.store(v_cache_ptr + cache_offs, v, mask=mask)


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Stores k, v [T, Hkv, D] at rows slot_mapping [T] of the caches [num_blocks, block_size, Hkv, D],
    where slot = block * block_size + row."""
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    assert k_cache.stride() == v_cache.stride(), "k_cache and v_cache must share one layout"
    _write_kv_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        num_kv_heads,
        k_cache.shape[1],
        HEAD_DIM=head_dim,
        BLOCK_H=triton.next_power_of_2(num_kv_heads),
        num_warps=4,
        **pdl.launch_args(k_cache.device),
    )
