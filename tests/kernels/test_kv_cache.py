"""write_kv against the torch reference."""

import pytest
import torch
from llmbench.kernels import reference, triton_ops

from tests.kernels.paged_kv import DEVICE, cos_sin_cache


@pytest.mark.parametrize("block_size,num_kv_heads,head_dim", [(4, 2, 16), (16, 1, 32), (16, 3, 8)])
def test_write_kv_matches_reference(block_size, num_kv_heads, head_dim):
    num_blocks, num_tokens = 6, 9
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = torch.randn(shape, device=DEVICE), torch.randn(shape, device=DEVICE)
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    # k and v as slices of a fused QKV output: strided, not contiguous
    qkv = torch.randn(num_tokens, 3, num_kv_heads, head_dim, device=DEVICE)
    k, v = qkv[:, 1], qkv[:, 2]
    slots = torch.randperm(num_blocks * block_size, device=DEVICE)[:num_tokens]
    triton_ops.write_kv(k, v, k_cache, v_cache, slots)
    reference.write_kv(k, v, ref_k, ref_v, slots)
    assert torch.equal(k_cache, ref_k)
    assert torch.equal(v_cache, ref_v)


def test_negative_slot_is_padding_and_left_unwritten():
    shape = (2, 4, 2, 16)
    k_cache, v_cache = torch.randn(shape, device=DEVICE), torch.randn(shape, device=DEVICE)
    before = k_cache.clone()
    k = torch.randn(2, 2, 16, device=DEVICE)
    triton_ops.write_kv(k, k.clone(), k_cache, v_cache, torch.tensor([5, -1], device=DEVICE))
    assert torch.equal(k_cache[1, 1], k[0])
    before[1, 1] = k[0]
    assert torch.equal(k_cache, before)


@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim", [(4, 2, 16), (3, 3, 32)])
def test_rope_and_write_kv_matches_rope_then_write(num_q_heads, num_kv_heads, head_dim):
    num_tokens, block_size = 5, 4
    shape = (6, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = torch.randn(shape, device=DEVICE), torch.randn(shape, device=DEVICE)
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    sizes = [num_q_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim]
    q, k, v = torch.randn(num_tokens, sum(sizes), device=DEVICE).split(sizes, dim=-1)
    positions = torch.randint(0, 64, (num_tokens,), device=DEVICE)
    slots = torch.randperm(k_cache.shape[0] * block_size, device=DEVICE)[:num_tokens]
    args = (positions, q, k, v, cos_sin_cache(64, head_dim), head_dim)
    q_out = triton_ops.rope_and_write_kv(*args, k_cache, v_cache, slots)
    q_ref = reference.rope_and_write_kv(*args, ref_k, ref_v, slots)
    torch.testing.assert_close(q_out, q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k_cache, ref_k, atol=1e-5, rtol=1e-5)
    assert torch.equal(v_cache, ref_v)
    # a negative slot still rotates q but keeps nothing
    before = k_cache.clone(), v_cache.clone()
    q_pad = triton_ops.rope_and_write_kv(*args, k_cache, v_cache, torch.full_like(slots, -1))
    torch.testing.assert_close(q_pad, q_ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])
