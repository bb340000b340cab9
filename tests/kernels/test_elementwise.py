"""RMSNorm, RoPE and SiLU-and-mul against the torch reference."""

import math

import pytest
import torch
from llmbench.kernels import reference, triton_ops

from tests.kernels.paged_kv import DEVICE, FP32_TOL, cos_sin_cache


@pytest.mark.parametrize("num_tokens,hidden", [(3, 64), (5, 100), (1, 256)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_reference(num_tokens, hidden, with_residual):
    x = torch.randn(num_tokens, hidden, device=DEVICE)
    weight = torch.randn(hidden, device=DEVICE)
    residual = torch.randn(num_tokens, hidden, device=DEVICE) if with_residual else None
    out, new_residual = triton_ops.rms_norm(x, weight, 1e-5, residual)
    ref_out, ref_residual = reference.rms_norm(x, weight, 1e-5, residual)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new_residual, ref_residual, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("num_q_heads,num_kv_heads,head_dim", [(4, 2, 16), (6, 6, 32), (8, 1, 64)])
def test_rope_matches_reference_on_strided_qkv(num_q_heads, num_kv_heads, head_dim):
    num_tokens = 7
    # q and k as column slices of one fused QKV output, the way the model produces them
    qkv = torch.randn(num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim, device=DEVICE)
    q, k, _ = qkv.split([num_q_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], dim=-1)
    positions = torch.randint(0, 500, (num_tokens,), device=DEVICE)
    cache = cos_sin_cache(512, head_dim)
    before = qkv.clone()
    q_out, k_out = triton_ops.rotary_embedding(positions, q, k, cache, head_dim)
    q_ref, k_ref = reference.rotary_embedding(positions, q, k, cache, head_dim)
    torch.testing.assert_close(q_out, q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k_out, k_ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(qkv, before), "rotary_embedding must not modify its inputs"


def test_rope_at_position_zero_is_identity():
    q = torch.randn(2, 4 * 16, device=DEVICE)
    k = torch.randn(2, 2 * 16, device=DEVICE)
    positions = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    q_out, k_out = triton_ops.rotary_embedding(positions, q, k, cos_sin_cache(8, 16), 16)
    torch.testing.assert_close(q_out, q)
    torch.testing.assert_close(k_out, k)


@pytest.mark.parametrize("num_tokens,inter", [(4, 48), (3, 1500), (1, 8)])
def test_silu_and_mul_matches_reference(num_tokens, inter):
    x = torch.randn(num_tokens, 2 * inter, device=DEVICE) * 3
    torch.testing.assert_close(
        triton_ops.silu_and_mul(x), reference.silu_and_mul(x), atol=FP32_TOL, rtol=FP32_TOL
    )


def test_silu_and_mul_known_value():
    x = torch.tensor([[1.0, 2.0]], device=DEVICE)
    expected = 1.0 / (1.0 + math.exp(-1.0)) * 2.0
    assert triton_ops.silu_and_mul(x).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.gpu
def test_bf16_llama_shapes_on_gpu():
    hidden, inter, head_dim = 4096, 14336, 128
    x = torch.randn(257, hidden, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    weight = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
    for got, want in zip(
        triton_ops.rms_norm(x, weight, 1e-5, residual),
        reference.rms_norm(x, weight, 1e-5, residual),
        strict=True,
    ):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    gate_up = torch.randn(33, 2 * inter, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(
        triton_ops.silu_and_mul(gate_up), reference.silu_and_mul(gate_up), atol=2e-2, rtol=2e-2
    )
    q = torch.randn(65, 32 * head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(65, 8 * head_dim, device="cuda", dtype=torch.bfloat16)
    positions = torch.randint(0, 8192, (65,), device="cuda")
    cache = cos_sin_cache(8192, head_dim)
    for got, want in zip(
        triton_ops.rotary_embedding(positions, q, k, cache, head_dim),
        reference.rotary_embedding(positions, q, k, cache, head_dim),
        strict=True,
    ):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
