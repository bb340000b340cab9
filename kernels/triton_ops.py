"""The Triton backend: the same functions, names and signatures as kernels.reference, so the model
swaps backends by swapping this module (EngineConfig.attention_backend)."""

import torch
import torch.nn.functional as F
from llmbench.kernels.activation import silu_and_mul
from llmbench.kernels.argmax import argmax
from llmbench.kernels.attention import paged_decode_attention
from llmbench.kernels.gemv import gemv
from llmbench.kernels.kv_cache import write_kv
from llmbench.kernels.norm import rms_norm
from llmbench.kernels.prefill_attention import paged_prefill_attention
from llmbench.kernels.rope import rope_and_write_kv, rotary_embedding

# A one-row linear layer is a weight-streaming GEMV. On the H200, at one row and with dependent launches,
# it beats cuBLAS on every Llama-3-8B matmul: QKV 15.8 vs 16.7 us, O 10.0 vs 12.9, gate-up with its
# activation fused 57.3 vs 62.4 (cuBLAS plus the activation kernel), down 30.6 vs 32.0, LM head 240 vs
# 242 (docs/measurements/h200/gemv_sweep.json). From two rows on cuBLAS's tiles win (decode_bs1.json).
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
    """The MLP's fused gate-up projection followed by its activation (fused into the GEMV at one row)."""
    if x.shape[0] <= GEMV_MAX_TOKENS:
        return gemv(x, weight, gated=True)
    return silu_and_mul(F.linear(x, weight))
