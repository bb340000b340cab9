"""The Triton backend: the same functions, names and signatures as kernels.reference, so the model
swaps backends by swapping this module (EngineConfig.attention_backend)."""

import torch
import torch.nn.functional as F

from kernels.activation import silu_and_mul
from kernels.attention import paged_decode_attention
from kernels.gemv import gemv
from kernels.kv_cache import write_kv
from kernels.norm import rms_norm
from kernels.prefill_attention import paged_prefill_attention
from kernels.rope import rope_and_write_kv, rotary_embedding

# up to this many rows a linear layer is a weight-streaming GEMV; past it cuBLAS's tensor-core tiles
# win (at 8 rows the GEMV's float32 FMAs approach the memory time: results/h200/decode_bs1.json)
GEMV_MAX_TOKENS = 4

__all__ = [
    "linear",
    "linear_silu_and_mul",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "rope_and_write_kv",
    "rotary_embedding",
    "silu_and_mul",
    "write_kv",
]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    if x.shape[0] <= GEMV_MAX_TOKENS:
        return gemv(x, weight, bias)
    return F.linear(x, weight, bias)


def linear_silu_and_mul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The MLP's fused gate-up projection followed by its activation (one kernel for few rows)."""
    if x.shape[0] <= GEMV_MAX_TOKENS:
        return gemv(x, weight, gated=True)
    return silu_and_mul(F.linear(x, weight))
