"""RMSNorm, optionally fused with the residual add that precedes it in every decoder layer."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from llmbench.kernels import pdl
from llmbench.kernels.pdl import wait_for_previous_kernel


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    new_residual_ptr,
    stride_x,
    stride_residual,
    stride_out,
    stride_new_residual,
    hidden,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    weight = tl.load(weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    wait_for_previous_kernel(PDL)
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(residual_ptr + row * stride_residual + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(new_residual_ptr + row * stride_new_residual + offs, x, mask=mask)
    variance = tl.sum(x * x, axis=0) / hidden
    out = x * tl.math.rsqrt(variance + eps) * weight
    tl.store(out_ptr + row * stride_out + offs, out, mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H] -> (normed, new_residual). With a residual, x + residual is normalized and returned as
    the new residual, in one pass over memory instead of three."""
    num_tokens, hidden = x.shape
    out = torch.empty_like(x)
    new_residual = torch.empty_like(x) if residual is not None else x
    if num_tokens == 0:
        return out, new_residual
    block = triton.next_power_of_2(hidden)
    # a whole row per program: enough warps that each thread holds about 16 bytes of it
    num_warps = max(1, min(16, block * x.element_size() // (32 * 16)))
    _rms_norm_kernel[(num_tokens,)](
        x,
        residual if residual is not None else x,
        weight,
        out,
        new_residual,
        x.stride(0),
        residual.stride(0) if residual is not None else 0,
        out.stride(0),
        new_residual.stride(0),
        hidden,
        eps,
        HAS_RESIDUAL=residual is not None,
        BLOCK=block,
        num_warps=num_warps,
        **pdl.launch_args(x.device),
    )
    return out, new_residual
