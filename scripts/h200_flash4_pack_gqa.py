"""The engine's prefill_attention flash op (llmbench kernels' `prefill_attention flash split`) with
FlashAttention-4's grouped-query packing as the package chooses it (on for grouped KV heads: a tile of
query rows holds the 4 query heads of a KV head for a quarter of the tokens, each K/V tile loaded once
for them) against packing off (a tile holds one head's tokens), at the prefill shapes of
`llmbench kernels` and the throughput workload's, in interleaved rounds, with the SM clock sampled.

    python scripts/h200_flash4_pack_gqa.py results/h200/flash4_pack_gqa.json
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch
from llmbench.kernels import flash_attention

from llmbench.env import command_line
from llmbench.gpu_clocks import clock_reading
from llmbench.kernel_bench import sampler_and_ceilings, time_case
from llmbench.kernel_cases_sdpa import split_case

SHAPES = ((4, 2048, 0), (8, 512, 1536), (1, 8192, 0), (32, 256, 0))
ROUNDS = 3


def main(out: Path) -> None:
    dtype = torch.bfloat16
    sampler, ceilings = sampler_and_ceilings(dtype)
    packed = flash_attention._varlen_function()
    variants = {"package's choice": packed, "pack_gqa off": functools.partial(packed, pack_gqa=False)}
    rows = []
    for _ in range(ROUNDS):
        for count, new, cached in SHAPES:
            for name, function in variants.items():
                flash_attention._varlen_function = lambda function=function: function
                case = split_case(count, new, dtype, prefill_attention="flash", cached=cached)
                us, sets = time_case(case, sampler)
                tflops = case.work / us / 1e6
                rows.append({"variant": name, "shape": case.shape, "us": us, "tflop_per_s": tflops})
                rows[-1] |= {"fraction_of_ceiling": tflops / ceilings["gemm_tflop_per_s"], "input_sets": sets}
                rows[-1]["clock"] = clock_reading(sampler)
                print(f"{name:18s} {case.shape:28s} {us:8.1f} us {tflops:6.1f} TFLOP/s", rows[-1]["clock"])
                torch.cuda.empty_cache()
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
