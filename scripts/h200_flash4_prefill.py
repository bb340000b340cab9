"""Prefill attention through FlashAttention-4's Hopper kernel (the `flash-attn-4` package, CuTe DSL)
beside the engine's paged kernel and cuDNN, at the prefill shapes of `llmbench kernels` and the
throughput workload's. FA4 reads the engine's cache layout as is: [blocks, block_size, Hkv, D] pages
with the block table as its page table, varlen queries by query_start_loc, seq_lens as seqused_k, and
causal aligned bottom-right (a chunk's queries come after its cached prefix).

Variants, each checked against the paged kernel (max abs error, bf16) and timed as `llmbench kernels`
times a case (a graph of rotated inputs, median), with the SM clock sampled:
- `fa4 paged b16`: the engine's 16-token blocks (FA4 loads them with cp.async);
- `fa4 paged b128`: 128-token blocks, one per key tile (FA4 loads them with TMA);
- `fa4 varlen`: fresh prompts on their own contiguous K/V (the role cuDNN plays in the sdpa split);
- `torch sdpa cudnn` (fresh prompts) as the same run's reference.

    python scripts/h200_flash4_prefill.py results/h200/flash4_prefill.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from flash_attn.cute import __version__ as fa4_version
from llmbench.kernels import flash_attention, triton_ops

from llmbench.env import command_line
from llmbench.gpu_clocks import clock_reading
from llmbench.kernel_bench import sampler_and_ceilings, time_case
from llmbench.kernel_cases import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, Case, _randn, prefill_case
from llmbench.kernel_cases_sdpa import library_case

SHAPES = ((1, 8192, 0), (4, 2048, 0), (8, 512, 1536), (32, 256, 0), (2, 2048, 2048), (16, 512, 0))
ROUNDS = 2
SCALE = HEAD_DIM**-0.5


def paged_inputs(count: int, new: int, cached: int, block: int, dtype: torch.dtype):
    context = cached + new
    blocks_per_seq = -(-context // block)
    k_cache = _randn(count * blocks_per_seq, block, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    tables = torch.randperm(count * blocks_per_seq, device="cuda", dtype=torch.int32).view(count, -1)
    q = _randn(count * new, NUM_HEADS, HEAD_DIM, dtype=dtype)
    starts = torch.arange(0, count + 1, device="cuda", dtype=torch.int32) * new
    seq_lens = torch.full((count,), context, device="cuda", dtype=torch.int32)
    return q, k_cache, v_cache, tables, starts, seq_lens


def variant_call(variant: str, count: int, new: int, cached: int, dtype: torch.dtype):
    """(call, the paged kernel's output on the same inputs)"""
    block = 128 if variant == "fa4 paged b128" else 16
    q, k_cache, v_cache, tables, starts, seq_lens = paged_inputs(count, new, cached, block, dtype)

    def reference():
        return triton_ops.paged_prefill_attention(q, k_cache, v_cache, tables, starts, seq_lens, SCALE)

    if variant == "fa4 varlen":
        # fresh prompts only: sequence b's keys are rows b * new .. (b + 1) * new - 1, like its queries
        position = torch.arange(new, device="cuda")
        page = tables[:, position // block].flatten()
        slot = (position % block).repeat(count)
        k, v = k_cache[page, slot].contiguous(), v_cache[page, slot].contiguous()
        return (lambda: flash_attention.fresh_prompt_attention(q, k, v, starts, new, SCALE)), reference
    args = (q, k_cache, v_cache, tables, starts, seq_lens, SCALE)
    return (lambda: flash_attention.paged_prefill_attention(*args, max_query_len=new)), reference


def fa4_case(variant: str, count: int, new: int, cached: int, dtype: torch.dtype) -> Case:
    paged = prefill_case(count, new, cached, dtype)
    return Case(
        variant,
        paged.shape,
        "compute",
        paged.work,
        paged.footprint,
        lambda: variant_call(variant, count, new, cached, dtype)[0],
    )


def main(out: Path) -> None:
    dtype = torch.bfloat16
    sampler, ceilings = sampler_and_ceilings(dtype)
    results: list[dict] = []
    head = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    head |= {"torch": torch.__version__, "flash_attn_4": fa4_version, "ceilings": ceilings}

    def save() -> None:
        out.write_text(json.dumps(head | {"rows": results}, indent=1) + "\n")

    def record(case: Case, error: float | None, compile_s: float | None = None) -> None:
        us, sets = time_case(case, sampler)
        tflops, clock = case.work / us / 1e6, clock_reading(sampler)
        row = {"variant": case.kernel, "shape": case.shape, "us": us, "tflop_per_s": tflops}
        row |= {"fraction_of_ceiling": tflops / ceilings["gemm_tflop_per_s"], "max_abs_error": error}
        row |= {"first_call_s": compile_s, "input_sets": sets, "clock": clock}
        results.append(row)
        print(
            f"{case.kernel:18s} {case.shape:28s} {us:8.1f} us {tflops:6.1f} TFLOP/s", clock, error, flush=True
        )
        save()
        torch.cuda.empty_cache()

    for count, new, cached in SHAPES:
        variants = ["fa4 paged b16", "fa4 paged b128"] + (["fa4 varlen"] if cached == 0 else [])
        working = []
        for variant in variants:
            try:
                call, reference = variant_call(variant, count, new, cached, dtype)
                start = time.perf_counter()
                ours = call()
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - start
                error = (ours.float() - reference().float()).abs().max().item()
                record(fa4_case(variant, count, new, cached, dtype), error, compile_s)
                working.append(variant)
            except Exception as e:  # a variant FA4 refuses: noted, the sweep goes on
                print(f"{variant} {count} {new} {cached}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                results.append(
                    {
                        "variant": variant,
                        "shape": f"B={count} new={new} cached={cached}",
                        "error": f"{type(e).__name__}: {str(e)[:500]}",
                    }
                )
                save()
                torch.cuda.empty_cache()
        for _ in range(ROUNDS):
            record(prefill_case(count, new, cached, dtype), None)
            if cached == 0:
                record(library_case("cudnn", count, new, dtype), None)
            for variant in working:
                record(fa4_case(variant, count, new, cached, dtype), None)
    save()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
