"""The decode attention kernel's launch parameters (kernels/attention.py DECODE_LAUNCH) against the
engine's decode shapes, each timed as `llmbench kernels` times a case (CUDA graph of rotated input
sets, median). Writes every configuration's times and, per shape, the best one beside the default.
`sweep` serves the prefill kernel's sweep too (scripts/h200_prefill_launch_sweep.py).

    python scripts/h200_decode_launch_sweep.py results/h200/decode_launch_sweep.json
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from llmbench.kernels import attention

from llmbench.env import command_line
from llmbench.kernel_bench import time_case
from llmbench.kernel_cases import Case, decode_case

# the throughput workload's batch (256 sequences, contexts 256-384), a long decode batch, and batch 1
SHAPES = [(256, 256), (256, 384), (256, 1024), (64, 2048), (16, 8192), (1, 2048)]
BLOCK_N, NUM_WARPS, NUM_STAGES = (32, 64, 128), (2, 4, 8), (2, 3, 4)


def grid_configs(grid: dict[str, tuple]) -> list[dict]:
    """Every combination of the grid's values."""
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def sweep(launch: dict, configs: list[dict], cases: dict[str, Callable[[], Case]], out: Path) -> None:
    """Time every case under each configuration (written into `launch`, the kernel's launch
    parameters, then restored); one the kernel cannot launch (too much shared memory) is recorded with
    its error. Writes the rows and, per case, the fastest beside the default."""
    default = dict(launch)
    keys = list(configs[0])
    rows = []
    for config in configs:
        launch.update(config)
        row = {**config, "us": {}}
        for name, case in cases.items():
            try:
                row["us"][name] = time_case(case())[0]
            except Exception as e:  # noqa: BLE001 - a launch the device refuses is a result here
                row["us"][name] = None
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    launch.clear()
    launch.update(default)
    is_default = next(r for r in rows if all(r[k] == v for k, v in default.items() if k in keys))
    best = {}
    for name in cases:
        fastest = min((r for r in rows if r["us"][name] is not None), key=lambda r: r["us"][name])
        best[name] = {
            "default_us": is_default["us"][name],
            "best_us": fastest["us"][name],
            "best": {k: fastest[k] for k in keys},
        }
    result = {
        "command": f"python scripts/{command_line()}",
        "device": torch.cuda.get_device_name(),
        "default": default,
        "best_per_shape": best,
        "configs": rows,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")


def main(out: Path) -> None:
    cases = {
        f"B={batch} ctx={context}": lambda b=batch, c=context: decode_case(b, c, torch.bfloat16)
        for batch, context in SHAPES
    }
    grid = {"block_n": BLOCK_N, "num_warps": NUM_WARPS, "num_stages": NUM_STAGES}
    attention.MANY_PROGRAMS_PER_SM = math.inf  # every shape takes DECODE_LAUNCH, the parameters swept
    sweep(attention.DECODE_LAUNCH, grid_configs(grid), cases, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
