"""The decode attention kernel's launch parameters (kernels/attention.py DECODE_LAUNCH) against the
engine's decode shapes, each timed as `llmbench kernels` times a case (CUDA graph of rotated input
sets, median). Writes every configuration's times and, per shape, the best one beside the default.

    python scripts/h200_decode_launch_sweep.py results/h200/decode_launch_sweep.json
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import torch

from kernels import attention
from llmbench.env import command_line
from llmbench.kernel_bench import time_case
from llmbench.kernel_cases import decode_case

# the throughput workload's batch (256 sequences, contexts 256-384), a long decode batch, and batch 1
SHAPES = [(256, 256), (256, 384), (256, 1024), (64, 2048), (16, 8192), (1, 2048)]
BLOCK_N, NUM_WARPS, NUM_STAGES = (32, 64, 128), (2, 4, 8), (2, 3, 4)


def main(out: Path) -> None:
    default = dict(attention.DECODE_LAUNCH)
    rows = []
    for block_n, num_warps, num_stages in itertools.product(BLOCK_N, NUM_WARPS, NUM_STAGES):
        attention.DECODE_LAUNCH.update(block_n=block_n, num_warps=num_warps, num_stages=num_stages)
        row = {"block_n": block_n, "num_warps": num_warps, "num_stages": num_stages, "us": {}}
        for batch, context in SHAPES:
            row["us"][f"B={batch} ctx={context}"] = time_case(decode_case(batch, context, torch.bfloat16))[0]
        rows.append(row)
        print(json.dumps(row), flush=True)
    attention.DECODE_LAUNCH.update(default)
    is_default = [r for r in rows if all(r[k] == v for k, v in default.items())][0]
    best = {}
    for shape in is_default["us"]:
        fastest = min(rows, key=lambda r: r["us"][shape])
        best[shape] = {
            "default_us": is_default["us"][shape],
            "best_us": fastest["us"][shape],
            "best": {k: fastest[k] for k in default},
        }
    result = {
        "command": command_line(),
        "device": torch.cuda.get_device_name(),
        "default": default,
        "best_per_shape": best,
        "configs": rows,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
