"""The paged prefill kernel's launch parameters (kernels/prefill_attention.py PREFILL_LAUNCH) against
prefill shapes: the throughput workload's chunks (32 prompts of 256 tokens a step), short chat-like
chunks, chunks after a cached prefix, and the long prompts `llmbench kernels` times. Each timed as
`llmbench kernels` times a case; writes every configuration's times and the best per shape.

    python scripts/h200_prefill_launch_sweep.py results/h200/prefill_launch_sweep_grouped.json
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from h200_decode_launch_sweep import grid_configs, sweep
from llmbench.kernels import prefill_attention

from llmbench.kernel_cases import prefill_case

# (sequences, new tokens, cached tokens)
SHAPES = [(32, 256, 0), (64, 128, 0), (16, 512, 0), (8, 512, 1536), (4, 2048, 0), (1, 8192, 0)]
# a program per query head at the two configurations that led the earlier sweep
# (prefill_launch_sweep.json), and a program per KV head (grouped) over tiles and warps
PER_HEAD = [
    {"grouped": False, "block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2},
    {"grouped": False, "block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 2},
]
GROUPED = {
    "grouped": (True,),
    "block_m": (16, 32, 64),
    "block_n": (32, 64, 128),
    "num_warps": (4, 8),
    "num_stages": (2, 3),
}


def main(out: Path) -> None:
    cases = {
        f"B={b} new={n} cached={c}": lambda b=b, n=n, c=c: prefill_case(b, n, c, torch.bfloat16)
        for b, n, c in SHAPES
    }
    prefill_attention.LONG_CONTEXT = math.inf  # every shape takes PREFILL_LAUNCH, the parameters swept
    sweep(prefill_attention.PREFILL_LAUNCH, PER_HEAD + grid_configs(GROUPED), cases, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
