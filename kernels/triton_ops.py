"""The Triton backend: the same functions, names and signatures as kernels.reference, so the model
swaps backends by swapping this module (EngineConfig.attention_backend)."""

import torch
import torch.nn.functional as F

from kernels.activation import silu_and_mul
from kernels.argmax import argmax
from kernels.attention import paged_decode_attention
from kernels.gemv import gemv
from kernels.kv_cache import write_kv
from kernels.norm import rms_norm
from kernels.prefill_attention import paged_prefill_attention
from kernels.rope import rope_and_write_kv, rotary_embedding

# A one-row linear layer is a weight-streaming GEMV: on the H200 it beats cuBLAS at one row on the QKV,
# O and LM-head shapes (16.5 vs 19.3, 12.3 vs 14.3, 242 vs 255 us) and ties on down_proj; from two rows
# on cuBLAS's tiles win (results/h200/decode_bs1.json, matmuls_cublas_vs_gemv).
GEMV_MAX_TOKENS = 1

__all__ = [
    "argmax",
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
    """The MLP's fused gate-up projection followed by its activation. cuBLAS plus the activation kernel
    (65.0 us at one row) beats the gated GEMV (72.3 us) on the 28672-row gate-up weight, so the
    gated GEMV stays a measured alternative in scripts/h200_decode.py."""
    return silu_and_mul(F.linear(x, weight))
