"""The skinny-matmul GEMV (plain and gated) and the backend's linear dispatch against float64 torch."""

import pytest
import torch
from llmbench.kernels import reference, triton_ops
from llmbench.kernels.gemv import MAX_ROWS, gemv

from tests.kernels.paged_kv import DEVICE


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("n,k", [(48, 64), (37, 100), (300, 512)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemv_matches_float64(m, n, k, with_bias):
    x = torch.randn(m, k, device=DEVICE)
    weight = torch.randn(n, k, device=DEVICE)
    bias = torch.randn(n, device=DEVICE) if with_bias else None
    want = x.double() @ weight.double().T + (bias.double() if with_bias else 0)
    got = gemv(x, weight, bias)
    assert got.shape == (m, n) and got.dtype == x.dtype
    assert rel_err(got, want) < 1e-5


@pytest.mark.parametrize("m,inter,k", [(1, 24, 64), (4, 40, 96), (7, 130, 32)])
def test_gated_gemv_is_silu_of_gate_times_up(m, inter, k):
    x = torch.randn(m, k, device=DEVICE)
    weight = torch.randn(2 * inter, k, device=DEVICE)
    gate, up = (x.double() @ weight.double().T).chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    got = gemv(x, weight, gated=True)
    assert got.shape == (m, inter)
    assert rel_err(got, want) < 1e-5


def test_gemv_reads_strided_rows():
    # rows of x as a column slice of a wider buffer, the way a fused projection's output is split
    wide = torch.randn(3, 200, device=DEVICE)
    x = wide[:, 40:104]
    weight = torch.randn(50, 64, device=DEVICE)
    assert rel_err(gemv(x, weight), x.double() @ weight.double().T) < 1e-5


def test_gemv_half_precision():
    x = torch.randn(2, 256, device=DEVICE).half()
    weight = (torch.randn(96, 256, device=DEVICE) / 16).half()
    got = gemv(x, weight)
    assert got.dtype == torch.float16
    # float32 accumulation: only the final rounding to float16 remains
    assert rel_err(got, x.double() @ weight.double().T) < 2e-3


def test_gemv_rejects_too_many_rows_and_bad_layouts():
    weight = torch.randn(16, 32, device=DEVICE)
    with pytest.raises(ValueError, match="at most"):
        gemv(torch.randn(MAX_ROWS + 1, 32, device=DEVICE), weight)
    with pytest.raises(ValueError, match="unit-stride"):
        gemv(torch.randn(32, 2, device=DEVICE).T, weight)
    with pytest.raises(ValueError, match="no bias"):
        gemv(torch.randn(1, 32, device=DEVICE), weight, torch.randn(8, device=DEVICE), gated=True)


@pytest.mark.parametrize("m", [0, 1, triton_ops.GEMV_MAX_TOKENS, triton_ops.GEMV_MAX_TOKENS + 3])
def test_backend_linear_matches_reference_on_both_sides_of_the_switch(m):
    x = torch.randn(m, 64, device=DEVICE)
    weight, bias = torch.randn(80, 64, device=DEVICE), torch.randn(80, device=DEVICE)
    torch.testing.assert_close(
        triton_ops.linear(x, weight, bias), reference.linear(x, weight, bias), atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(
        triton_ops.linear_silu_and_mul(x, weight),
        reference.linear_silu_and_mul(x, weight),
        atol=1e-4,
        rtol=1e-4,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_bf16_llama3_8b_shapes_on_gpu(m):
    # bf16 operands: the error is the inputs' rounding, against a float64 product of those same inputs
    for n, k in ((6144, 4096), (4096, 4096), (4096, 14336), (128256, 4096)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        assert rel_err(gemv(x, weight), x.double() @ weight.double().T) < 1e-2
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(2 * 14336, 4096, device="cuda", dtype=torch.bfloat16)
    gate, up = (x.double() @ weight.double().T).chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    assert rel_err(gemv(x, weight, gated=True), want) < 1e-2
