"""The paged prefill kernel against an earlier version of itself, in one process: the shapes of the launch
sweeps (fresh prompts of 128-8,192 tokens, and chunks after a cached prefix), each timed as `llmbench
kernels` times a case (a graph of rotated inputs, median), the two versions in interleaved rounds; then
the current kernel under each launch in LAUNCHES, forced at every shape. Each version's output is
checked against the other's (max abs error, bf16).

The earlier version is a package `kernels_before` (its kernels/attention.py and prefill_attention.py,
importing each other under that name) found on the path given. For the commit before the kernel's
whole-tile loop (results/h200/prefill_kernel_ab.json):

    mkdir -p BEFORE_DIR/kernels_before && touch BEFORE_DIR/kernels_before/__init__.py
    for f in attention prefill_attention; do git show 3d33de8:kernels/$f.py \
        | sed 's/from kernels.attention import/from kernels_before.attention import/' \
        > BEFORE_DIR/kernels_before/$f.py; done
    python scripts/h200_prefill_kernel_ab.py BEFORE_DIR results/h200/prefill_kernel_ab.json
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import torch
from llmbench.kernels import prefill_attention

from llmbench.env import command_line
from llmbench.gpu_clocks import clock_reading
from llmbench.kernel_bench import sampler_and_ceilings, time_case
from llmbench.kernel_cases import HEAD_DIM, NUM_HEADS, Case, _paged_cache, _randn, prefill_case

SHAPES = ((32, 256, 0), (64, 128, 0), (16, 512, 0), (8, 512, 1536), (4, 2048, 0), (1, 8192, 0))
ROUNDS = 3
LAUNCHES = (  # (grouped, block_m, block_n, num_warps, num_stages)
    (False, 64, 32, 4, 2),
    (True, 64, 64, 8, 3),
    (False, 128, 128, 8, 3),
    (False, 128, 128, 8, 2),
    (False, 128, 64, 8, 3),
    (False, 64, 64, 4, 3),
    (True, 32, 128, 8, 3),
    (True, 32, 64, 4, 3),
)


def inputs(count: int, new: int, cached: int, dtype: torch.dtype):
    k_cache, v_cache, tables = _paged_cache(count, cached + new, dtype)
    q = _randn(count * new, NUM_HEADS, HEAD_DIM, dtype=dtype)
    starts = torch.arange(0, count + 1, device="cuda", dtype=torch.int32) * new
    seq_lens = torch.full((count,), cached + new, device="cuda", dtype=torch.int32)
    return q, k_cache, v_cache, tables, starts, seq_lens


def version_case(module, label: str, count: int, new: int, cached: int, dtype: torch.dtype) -> Case:
    reference = prefill_case(count, new, cached, dtype)

    def make():
        args = inputs(count, new, cached, dtype)
        return lambda: module.paged_prefill_attention(*args, HEAD_DIM**-0.5)

    return Case(label, reference.shape, "compute", reference.work, reference.footprint, make)


def forced(launch: tuple) -> None:
    """Make the current kernel take `launch` at every context length."""
    grouped, block_m, block_n, num_warps, num_stages = launch
    chosen = {"grouped": grouped, "block_m": block_m, "block_n": block_n}
    chosen |= {"num_warps": num_warps, "num_stages": num_stages}
    prefill_attention.PREFILL_LAUNCH = prefill_attention.PREFILL_LAUNCH_LONG = chosen


def main(before_dir: Path, out: Path) -> None:
    sys.path.insert(0, str(before_dir))
    before = importlib.import_module("kernels_before.prefill_attention")
    defaults = (prefill_attention.PREFILL_LAUNCH, prefill_attention.PREFILL_LAUNCH_LONG)
    dtype = torch.bfloat16
    sampler, ceilings = sampler_and_ceilings(dtype)
    results = []

    def record(case: Case, launch: tuple | None = None, error: float | None = None) -> None:
        us, sets = time_case(case, sampler)
        tflops, clock = case.work / us / 1e6, clock_reading(sampler)
        results.append({"version": case.kernel, "shape": case.shape, "launch": launch, "us": us})
        results[-1] |= {"tflop_per_s": tflops, "max_abs_error": error, "input_sets": sets, "clock": clock}
        print(f"{case.kernel:8s} {case.shape:24s} {launch} {us:8.1f} us {tflops:6.1f} TFLOP/s", clock, error)
        torch.cuda.empty_cache()

    for count, new, cached in SHAPES:
        args = inputs(count, new, cached, dtype)
        theirs = before.paged_prefill_attention(*args, HEAD_DIM**-0.5).float()
        error = (
            (prefill_attention.paged_prefill_attention(*args, HEAD_DIM**-0.5).float() - theirs).abs().max()
        )
        print(f"B={count} new={new} cached={cached}: max abs difference {error.item()}")
        for _ in range(ROUNDS):
            record(version_case(before, "before", count, new, cached, dtype), None, error.item())
            record(version_case(prefill_attention, "after", count, new, cached, dtype), None, error.item())
    for launch in LAUNCHES:
        forced(launch)
        for count, new, cached in SHAPES:
            record(version_case(prefill_attention, "after", count, new, cached, dtype), launch)
    prefill_attention.PREFILL_LAUNCH, prefill_attention.PREFILL_LAUNCH_LONG = defaults
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "rows": results}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
