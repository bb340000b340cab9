"""The paged decode kernel against an earlier version of itself, in one process, at the decode shapes of
`llmbench kernels` and the throughput workload's (256 sequences at 256-384 tokens of context): each
timed as `llmbench kernels` times a case, the two versions in interleaved rounds, their outputs checked
against each other (max abs error, bf16). The earlier version is a package `kernels_before` on the path
given, made as scripts/h200_prefill_kernel_ab.py's docstring says. results/h200/decode_kernel_ab.json
timed the tree of 3db364a (the decode kernel's whole tiles unmasked, since reverted) against 3d33de8:

    python scripts/h200_decode_kernel_ab.py BEFORE_DIR results/h200/decode_kernel_ab.json
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import torch
from llmbench.kernels import attention

from llmbench.env import command_line
from llmbench.gpu_clocks import clock_reading
from llmbench.kernel_bench import sampler_and_ceilings, time_case
from llmbench.kernel_cases import HEAD_DIM, NUM_HEADS, Case, _paged_cache, _randn, decode_case

SHAPES = ((64, 2048), (1, 2048), (1, 32768), (16, 8192), (32, 2048), (256, 1024), (256, 384), (256, 256))
ROUNDS = 3


def inputs(batch: int, context: int, dtype: torch.dtype):
    k_cache, v_cache, tables = _paged_cache(batch, context, dtype)
    q = _randn(batch, NUM_HEADS, HEAD_DIM, dtype=dtype)
    seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    return q, k_cache, v_cache, tables, seq_lens


def version_case(module, label: str, batch: int, context: int, dtype: torch.dtype) -> Case:
    reference = decode_case(batch, context, dtype)

    def make():
        args = inputs(batch, context, dtype)
        return lambda: module.paged_decode_attention(*args, HEAD_DIM**-0.5)

    return Case(label, reference.shape, "memory", reference.work, reference.footprint, make)


def main(before_dir: Path, out: Path) -> None:
    sys.path.insert(0, str(before_dir))
    before = importlib.import_module("kernels_before.attention")
    dtype = torch.bfloat16
    sampler, ceilings = sampler_and_ceilings(dtype)
    results = []
    for batch, context in SHAPES:
        args = inputs(batch, context, dtype)
        theirs = before.paged_decode_attention(*args, HEAD_DIM**-0.5).float()
        error = (attention.paged_decode_attention(*args, HEAD_DIM**-0.5).float() - theirs).abs().max().item()
        for _ in range(ROUNDS):
            for module, label in ((before, "before"), (attention, "after")):
                case = version_case(module, label, batch, context, dtype)
                us, sets = time_case(case, sampler)
                rate, clock = case.work / us / 1e3, clock_reading(sampler)
                results.append({"version": label, "shape": case.shape, "us": us, "gb_per_s": rate})
                results[-1] |= {"max_abs_error": error, "input_sets": sets, "clock": clock}
                print(f"{label:8s} {case.shape:16s} {us:8.1f} us {rate:7.1f} GB/s", clock, error, flush=True)
                torch.cuda.empty_cache()
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "rows": results}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
