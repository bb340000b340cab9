"""The no-prefix prefill shapes of `llmbench kernels` three ways, side by side: our paged kernel (the
prefill case of cases.py), the engine's split op as the model calls it with prefill_attention
sdpa (kernels/attention_split.py: a plan from host row offsets, SDPA on the chunk's own K/V, the decode
kernel for decodes, the paged kernel for the rest), and torch's SDPA alone with one backend (cuDNN,
flash) on contiguous tensors. With prefill_attention flash, the split op at every prefill shape, cached
prefixes included (FlashAttention-4). And mixed steps (prompts and decodes), in the paged prefill
kernel's one launch and split."""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from llmbench.kernelbench.cases import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, Case, _paged_cache, _randn
from llmbench.kernels import flash_attention, triton_ops
from llmbench.kernels.attention_split import plan_attention_split, sdpa_backends, split_attention

logger = logging.getLogger(__name__)

LIBRARY_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def _attention_flops(
    num_prompts: int, new_tokens: int, num_decodes: int, context: int, cached: int = 0
) -> int:
    """Causal prompts after `cached` tokens plus one-token decodes over `context` keys; QK^T and PV
    are 2 * D FLOPs per (query, key) pair each."""
    pairs = num_prompts * (cached * new_tokens + new_tokens * (new_tokens + 1) // 2) + num_decodes * context
    return 4 * HEAD_DIM * NUM_HEADS * pairs


SPLIT_NAMES = {
    "sdpa": "prefill_attention sdpa split",
    "flash": "prefill_attention flash split",
    "paged": "mixed step split (paged prompts)",
}


def split_case(
    num_prompts: int,
    new_tokens: int,
    dtype: torch.dtype,
    num_decodes: int = 0,
    prefill_attention: str = "sdpa",
    cached: int = 0,
) -> Case:
    """The engine's op for a step of num_prompts prompts of new_tokens after `cached` cached tokens,
    and num_decodes decodes at context new_tokens, planned for prefill_attention (the decodes go to
    the decode kernel when there are enough of them). k is contiguous (RoPE's output) and v a strided
    view of the fused QKV projection, as in the model."""
    size = dtype.itemsize
    num_tokens = num_prompts * new_tokens + num_decodes
    context = cached + new_tokens
    footprint = (2 * NUM_HEADS + 3 * NUM_KV_HEADS) * HEAD_DIM * size * num_tokens
    footprint += 2 * (num_prompts + num_decodes) * context * NUM_KV_HEADS * HEAD_DIM * size

    def make():
        num_seqs = num_prompts + num_decodes
        k_cache, v_cache, tables = _paged_cache(num_seqs, context, dtype)
        q = _randn(num_tokens, NUM_HEADS, HEAD_DIM, dtype=dtype)
        k = _randn(num_tokens, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
        qkv = _randn(num_tokens, (NUM_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM, dtype=dtype)
        v = qkv[:, -NUM_KV_HEADS * HEAD_DIM :].view(num_tokens, NUM_KV_HEADS, HEAD_DIM)
        q_lens = np.array([new_tokens] * num_prompts + [1] * num_decodes)
        query_start = np.concatenate(([0], np.cumsum(q_lens)))
        lens = np.array([context] * num_prompts + [new_tokens] * num_decodes)
        seq_lens = torch.from_numpy(lens).to(device=q.device, dtype=torch.int32)
        split = plan_attention_split(query_start, lens, tables, seq_lens, prefill_attention, k_cache.shape[1])
        args = (q, k, v, k_cache, v_cache, split, HEAD_DIM**-0.5)

        def call():
            with sdpa_backends():  # as the model runner runs a forward
                return split_attention(*args, triton_ops)

        return call

    decodes = f" + {num_decodes} decodes" if num_decodes else ""
    shape = f"B={num_prompts} new={new_tokens} cached={cached}{decodes}"
    flops = _attention_flops(num_prompts, new_tokens, num_decodes, new_tokens, cached)
    name = SPLIT_NAMES[prefill_attention]
    return Case(name, shape, "compute", flops, footprint, make, optional=prefill_attention != "paged")


def mixed_paged_case(num_prompts: int, new_tokens: int, num_decodes: int, dtype: torch.dtype) -> Case:
    """The same mixed step in the paged kernel's single launch (what prefill_attention paged runs)."""
    size = dtype.itemsize
    num_seqs, num_tokens = num_prompts + num_decodes, num_prompts * new_tokens + num_decodes
    footprint = (2 * num_tokens * NUM_HEADS + 2 * num_seqs * new_tokens * NUM_KV_HEADS) * HEAD_DIM * size

    def make():
        k_cache, v_cache, tables = _paged_cache(num_seqs, new_tokens, dtype)
        q = _randn(num_tokens, NUM_HEADS, HEAD_DIM, dtype=dtype)
        q_lens = torch.tensor([new_tokens] * num_prompts + [1] * num_decodes, device=q.device)
        starts = torch.cat((q_lens.new_zeros(1), q_lens.cumsum(0))).int()
        seq_lens = torch.full((num_seqs,), new_tokens, device=q.device, dtype=torch.int32)
        return lambda: triton_ops.paged_prefill_attention(
            q, k_cache, v_cache, tables, starts, seq_lens, HEAD_DIM**-0.5
        )

    shape = f"B={num_prompts} new={new_tokens} cached=0 + {num_decodes} decodes"
    flops = _attention_flops(num_prompts, new_tokens, num_decodes, new_tokens)
    return Case("paged_prefill_attention", shape, "compute", flops, footprint, make)


def library_case(backend: str, num_seqs: int, new_tokens: int, dtype: torch.dtype) -> Case:
    """torch's SDPA alone with one backend: q [B, Hq, L, D] and k, v [B, Hkv, L, D] in the BSHD layout
    (tokens outermost), causal, grouped KV heads."""
    size = dtype.itemsize
    footprint = num_seqs * new_tokens * (2 * NUM_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM * size

    def make():
        q = _randn(num_seqs, new_tokens, NUM_HEADS, HEAD_DIM, dtype=dtype).transpose(1, 2)
        k = _randn(num_seqs, new_tokens, NUM_KV_HEADS, HEAD_DIM, dtype=dtype).transpose(1, 2)
        v = torch.randn_like(k)

        def call():
            with sdpa_kernel(LIBRARY_BACKENDS[backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        return call

    shape = f"B={num_seqs} new={new_tokens} cached=0"
    flops = _attention_flops(num_seqs, new_tokens, 0, new_tokens)
    return Case(f"torch sdpa {backend}", shape, "compute", flops, footprint, make, optional=True)


def sdpa_cases(dtype: torch.dtype, prefills: list[tuple[int, int, int]]) -> list[Case]:
    """For each no-prefix prefill shape: the sdpa split op and each library backend; for every prefill
    shape the flash split op where FlashAttention-4 runs here; a long mixed step (two 2048-token
    prompts and 64 decodes) paged and split; and a chat-like one (two 256-token prompts and 256 decodes
    at context 256: a ShareGPT-like step) in one paged launch and with its decodes split."""
    fresh = [(b, n) for b, n, cached in prefills if cached == 0]
    cases = [split_case(b, n, dtype) for b, n in fresh]
    cases += [library_case(backend, b, n, dtype) for b, n in fresh for backend in LIBRARY_BACKENDS]
    reason = flash_attention.unavailable_reason(torch.device("cuda"), dtype, HEAD_DIM)
    if reason is None:
        cases += [split_case(b, n, dtype, prefill_attention="flash", cached=c) for b, n, c in prefills]
    else:
        logger.warning("prefill_attention flash rows left out: FlashAttention-4 %s", reason)
    cases += [mixed_paged_case(2, 2048, 64, dtype), split_case(2, 2048, dtype, num_decodes=64)]
    return cases + [mixed_paged_case(2, 256, 256, dtype), split_case(2, 256, dtype, 256, "paged")]
