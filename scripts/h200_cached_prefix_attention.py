"""Chunks after a cached prefix: the engine's paged prefill kernel against cuDNN on K/V gathered from the
paged cache into contiguous rows, at the cached-prefix shapes of `llmbench kernels` and three more.

The engine sends a chunk with nothing cached to SDPA (cuDNN) and every other chunk to the paged kernel,
which reaches ~0.45 of the GEMM ceiling there. Ways to reach cuDNN for them, each after one gather of
the sequence's K/V out of its blocks:
- `mask`: one SDPA call with a boolean lower-right causal mask (query i sees keys 0 .. cached + i),
  cuDNN only;
- `lower_right`: one SDPA call with torch's lower-right causal bias, whichever backend takes it;
- `two_parts`: cuDNN over the prefix (no mask) and over the chunk's own keys (causal), each with its
  log-sum-exp, merged: the split the engine already makes for fresh prompts, plus a prefix part.
Each is checked against the paged kernel (max abs error, bf16), then timed as `llmbench kernels` times a
case (a graph of rotated inputs, median), gathers included, with the SM clock sampled.

    python scripts/h200_cached_prefix_attention.py results/h200/cached_prefix_attention.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from llmbench.kernels import triton_ops
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from llmbench.env import command_line
from llmbench.gpu_clocks import clock_reading
from llmbench.kernel_bench import sampler_and_ceilings, time_case
from llmbench.kernel_cases import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, Case, _paged_cache, _randn, prefill_case

SHAPES = ((8, 512, 1536), (1, 2048, 6144), (4, 1024, 3072), (16, 256, 768))
VARIANTS = ("mask", "lower_right", "two_parts")
ROUNDS = 3
SCALE = HEAD_DIM**-0.5


def gathered(cache: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """[blocks, block_size, Hkv, D] cache rows of each sequence's table -> [B, Hkv, context, D]."""
    rows = cache[tables]  # [B, blocks, block_size, Hkv, D]
    return rows.flatten(1, 2).transpose(1, 2)


def _cudnn_with_lse(q, k, v, causal: bool):
    out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, causal, False, scale=SCALE
    )[:2]
    return out, lse.view(*q.shape[:3], 1)


def attention(variant: str, q, k_cache, v_cache, tables, count: int, new: int, cached: int) -> torch.Tensor:
    """q [count * new, Hq, D] -> [count, Hq, new, D] through `variant`."""
    heads_first = q.view(count, new, NUM_HEADS, HEAD_DIM).transpose(1, 2)
    k, v = gathered(k_cache, tables), gathered(v_cache, tables)
    if variant == "mask":
        visible = torch.ones(new, cached + new, dtype=torch.bool, device=q.device).tril(cached)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(
                heads_first, k, v, attn_mask=visible, scale=SCALE, enable_gqa=True
            )
    if variant == "lower_right":
        bias = causal_lower_right(new, cached + new)
        return F.scaled_dot_product_attention(heads_first, k, v, attn_mask=bias, scale=SCALE, enable_gqa=True)
    group = NUM_HEADS // NUM_KV_HEADS  # the private op takes equal head counts
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    prefix, prefix_lse = _cudnn_with_lse(heads_first, k[:, :, :cached], v[:, :, :cached], False)
    own, own_lse = _cudnn_with_lse(heads_first, k[:, :, cached:], v[:, :, cached:], True)
    top = torch.maximum(prefix_lse, own_lse)
    w_prefix, w_own = (prefix_lse - top).exp(), (own_lse - top).exp()
    return ((prefix.float() * w_prefix + own.float() * w_own) / (w_prefix + w_own)).to(q.dtype)


def inputs(count: int, new: int, cached: int, dtype: torch.dtype):
    k_cache, v_cache, tables = _paged_cache(count, cached + new, dtype)
    return _randn(count * new, NUM_HEADS, HEAD_DIM, dtype=dtype), k_cache, v_cache, tables


def max_error(variant: str, count: int, new: int, cached: int, dtype: torch.dtype) -> float:
    q, k_cache, v_cache, tables = inputs(count, new, cached, dtype)
    starts = torch.arange(0, count + 1, device="cuda", dtype=torch.int32) * new
    seq_lens = torch.full((count,), cached + new, device="cuda", dtype=torch.int32)
    paged = triton_ops.paged_prefill_attention(q, k_cache, v_cache, tables, starts, seq_lens, SCALE)
    ours = attention(variant, q, k_cache, v_cache, tables, count, new, cached)
    return (ours.transpose(1, 2).reshape(paged.shape).float() - paged.float()).abs().max().item()


def gathered_case(variant: str, count: int, new: int, cached: int, dtype: torch.dtype) -> Case:
    paged = prefill_case(count, new, cached, dtype)

    def make():
        q, k_cache, v_cache, tables = inputs(count, new, cached, dtype)
        return lambda: attention(variant, q, k_cache, v_cache, tables, count, new, cached)

    return Case(f"gathered {variant}", paged.shape, "compute", paged.work, 2 * paged.footprint, make)


def main(out: Path) -> None:
    dtype = torch.bfloat16
    sampler, ceilings = sampler_and_ceilings(dtype)
    results = []

    def record(case: Case, error: float | None) -> None:
        us, sets = time_case(case, sampler)
        tflops, clock = case.work / us / 1e6, clock_reading(sampler)
        results.append({"variant": case.kernel, "shape": case.shape, "us": us, "tflop_per_s": tflops})
        results[-1] |= {"max_abs_error": error, "input_sets": sets, "clock": clock}
        print(
            f"{case.kernel:24s} {case.shape:30s} {us:8.1f} us {tflops:6.1f} TFLOP/s", clock, error, flush=True
        )
        torch.cuda.empty_cache()

    for count, new, cached in SHAPES:
        working = []
        for variant in VARIANTS:
            try:
                error = max_error(variant, count, new, cached, dtype)
                record(gathered_case(variant, count, new, cached, dtype), error)
                working.append(variant)
            except Exception as e:  # a backend that refuses the call: noted, the sweep goes on
                print(f"{variant} {count} {new} {cached}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                torch.cuda.empty_cache()
        for _ in range(ROUNDS):
            record(prefill_case(count, new, cached, dtype), None)
            for variant in working:
                record(gathered_case(variant, count, new, cached, dtype), None)
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "rows": results}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
