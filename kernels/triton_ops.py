"""The Triton backend: the same functions, names and signatures as kernels.reference, so the model
swaps backends by swapping this module (EngineConfig.attention_backend)."""

from kernels.activation import silu_and_mul
from kernels.attention import paged_decode_attention
from kernels.kv_cache import write_kv
from kernels.norm import rms_norm
from kernels.prefill_attention import paged_prefill_attention
from kernels.rope import rotary_embedding

__all__ = [
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "write_kv",
]
