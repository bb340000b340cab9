"""Skinny matmul for decode: out [M, N] = x [M, K] @ w [N, K]^T with M <= MAX_ROWS.

At a handful of rows a linear layer is a pass over its weight: the kernel streams each weight row once,
in wide contiguous loads, and keeps the few activation rows beside it. Products are summed elementwise
in float32 (no tensor-core dot: it needs 16 rows and would multiply padding), reduced once at the end.
Programs split N only, so every program finishes its rows alone: no split-K partials, no second kernel.
Under dependent launch (kernels/pdl.py) a program loads its first weight tile before it waits for the
kernel that writes x.

`gated=True` fuses the Llama MLP activation: w holds gate then up rows ([2I, K]), and a program
computes matching gate and up rows together and writes silu(gate) * up, [M, I]."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from llmbench.kernels import pdl
from llmbench.kernels.pdl import wait_for_previous_kernel

MAX_ROWS = 8  # the kernel's limit; linear() in triton_ops decides where it pays (GEMV_MAX_TOKENS)


@triton.jit
def _load_w(w_rows, k, start, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """w [BLOCK_N, BLOCK_K] at column `start`, as float32. The weight is read exactly once: the loads
    are marked to leave L2 to the activations."""
    cols = start + tl.arange(0, BLOCK_K)
    if EVEN_K:
        w = tl.load(w_rows + cols[None, :], eviction_policy="evict_first")
    else:
        w = tl.load(w_rows + cols[None, :], mask=cols[None, :] < k, other=0.0, eviction_policy="evict_first")
    return w.to(tl.float32)


@triton.jit
def _load_x(x_ptr, m, k, start, stride_x, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """x [BLOCK_M, BLOCK_K] at column `start`, as float32."""
    offs_m = tl.arange(0, BLOCK_M)
    cols = start + tl.arange(0, BLOCK_K)
    mask = (offs_m[:, None] < m) & (cols[None, :] < k)
    return tl.load(x_ptr + offs_m[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _one_row_times_w(x_ptr, w_rows, w_first, m, k, stride_x, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """[1, BLOCK_N]: one x row against the weight rows, whose first tile is already loaded; a 2D
    accumulator in the weight tile's layout."""
    acc = w_first * _load_x(x_ptr, m, k, 0, stride_x, 1, BLOCK_K)
    for start in range(BLOCK_K, k, BLOCK_K):
        acc += _load_w(w_rows, k, start, EVEN_K, BLOCK_K) * _load_x(x_ptr, m, k, start, stride_x, 1, BLOCK_K)
    return tl.sum(acc, 1)[None, :]


@triton.jit
def _rows_times_w(
    x_ptr,
    w_rows,
    w_first,
    m,
    k,
    stride_x,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """[BLOCK_M, BLOCK_N]: several x rows against the weight rows, broadcast over a 3D accumulator."""
    x = _load_x(x_ptr, m, k, 0, stride_x, BLOCK_M, BLOCK_K)
    acc = w_first[None, :, :] * x[:, None, :]
    for start in range(BLOCK_K, k, BLOCK_K):
        w = _load_w(w_rows, k, start, EVEN_K, BLOCK_K)
        x = _load_x(x_ptr, m, k, start, stride_x, BLOCK_M, BLOCK_K)
        acc += w[None, :, :] * x[:, None, :]
    return tl.sum(acc, 2)


@triton.jit
def _dot_rows(
    x_ptr,
    w_rows,
    w_first,
    m,
    k,
    stride_x,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    if BLOCK_M == 1:
        out = _one_row_times_w(x_ptr, w_rows, w_first, m, k, stride_x, EVEN_K, BLOCK_K)
    else:
        out = _rows_times_w(x_ptr, w_rows, w_first, m, k, stride_x, EVEN_K, BLOCK_M, BLOCK_K)
    return out


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    m,
    n,
    k,
    stride_x,
    stride_out,
    HAS_BIAS: tl.constexpr,
    GATED: tl.constexpr,
    EVEN_K: tl.constexpr,
    PDL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    # rows past n re-read row n-1 and are never stored: the hot loop carries no row mask
    safe_rows = tl.minimum(rows, n - 1).to(tl.int64)
    w_rows = w_ptr + safe_rows[:, None] * k
    # no kernel writes the weights: their first tiles stream in while the previous kernel finishes
    w_first = _load_w(w_rows, k, 0, EVEN_K, BLOCK_K)
    if GATED:
        up_first = _load_w(w_rows + n * k, k, 0, EVEN_K, BLOCK_K)
    wait_for_previous_kernel(PDL)
    out = _dot_rows(x_ptr, w_rows, w_first, m, k, stride_x, EVEN_K, BLOCK_M, BLOCK_K)
    if HAS_BIAS:
        out += tl.load(bias_ptr + safe_rows).to(tl.float32)[None, :]
    if GATED:
        up = _dot_rows(x_ptr, w_rows + n * k, up_first, m, k, stride_x, EVEN_K, BLOCK_M, BLOCK_K)
        out = out * tl.sigmoid(out) * up
    offs_m = tl.arange(0, BLOCK_M)
    out_mask = (offs_m[:, None] < m) & (rows[None, :] < n)
    out_ptrs = out_ptr + offs_m[:, None] * stride_out + rows[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=out_mask)


def launch_config(block_m: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps): few rows a program, long runs of K. On an H200 at one row, with
    dependent launches, 4 x 1024 by 4 warps was the best or within 1.1 us of it on every Llama-3-8B
    matmul, 16 x 512 (the earlier choice) 1-7 us slower (docs/measurements/h200/gemv_sweep.json)."""
    # up to 64 accumulators a thread past one row: more rows shorten the K run, not the row tile
    block_k = max(16, 1024 // max(1, block_m // 2))
    return 4, min(block_k, triton.next_power_of_2(k)), 4


def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    gated: bool = False,
    *,
    launch: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS, rows may be strided) times weight [N, K]^T (+ bias [N]) -> [M, N] in
    x's dtype. gated: weight is [2I, K] gate-then-up and the result is silu(gate) * up, [M, I].
    launch overrides launch_config's (BLOCK_N, BLOCK_K, num_warps) (tuning sweeps)."""
    m, k = x.shape
    if m > MAX_ROWS:
        raise ValueError(f"gemv takes at most {MAX_ROWS} rows, got {m}")
    if x.stride(1) != 1 or not weight.is_contiguous():
        raise ValueError("gemv needs unit-stride rows of x and a contiguous weight")
    if gated and bias is not None:
        raise ValueError("gated gemv takes no bias")
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    block_m = triton.next_power_of_2(m)
    # gated: a program's gate rows, then its up rows, each a tile of the plain launch's size
    block_n, block_k, warps = launch or launch_config(block_m, k)
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x,
        weight,
        bias if bias is not None else weight,
        out,
        m,
        n,
        k,
        x.stride(0),
        out.stride(0),
        HAS_BIAS=bias is not None,
        GATED=gated,
        EVEN_K=k % block_k == 0,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        num_warps=warps,
        **pdl.launch_args(x.device),
    )
    return out
