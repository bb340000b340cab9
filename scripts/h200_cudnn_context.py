"""Why does cuDNN's prefill attention run 8-15% slower late in some processes? In one process: rounds
of the engine's split op (prefill_attention sdpa) and cuDNN alone at B=1 new=8192, then after each of:
~10 s of our paged prefill kernel (Triton), 15 s idle, ~10 s of 8192^3 GEMMs, cuDNN at the other
shapes `llmbench kernels` times (B=4 new=2048, B=32 new=256), torch's flash backend at B=1 new=8192, the
Triton kernel of h200_fresh_attention_sweep.py; each round with the SM clock, temperature and power
from nvidia-smi. Timed as `llmbench kernels` times
a case (graph of rotated inputs, median).

    python scripts/h200_cudnn_context.py results/h200/cudnn_context.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from h200_cudnn_drift import gpu_state
from h200_fresh_attention_sweep import fresh_case

from llmbench.env import command_line
from llmbench.kernel_bench import measure_ceilings, time_case
from llmbench.kernel_cases import prefill_case
from llmbench.kernel_cases_sdpa import library_case, split_case

ROUNDS = 5


def busy(case, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time_case(case)


def main(out: Path) -> None:
    dtype = torch.bfloat16
    torch.manual_seed(0)
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": measure_ceilings(dtype)}
    cases = [split_case(1, 8192, dtype), library_case("cudnn", 1, 8192, dtype)]
    rows = []

    def rounds(phase: str) -> None:
        for round_ in range(ROUNDS):
            for case in cases:
                us, _ = time_case(case)
                row = {"phase": phase, "round": round_, "kernel": case.kernel, "us": us}
                rows.append(row | {"tflop_per_s": case.work / us / 1e6} | gpu_state())
                print(json.dumps(rows[-1]), flush=True)

    rounds("start")
    busy(prefill_case(1, 8192, 0, dtype), 10)
    rounds("after 10 s of the paged prefill kernel")
    torch.cuda.synchronize()
    time.sleep(15)
    rounds("after 15 s idle")
    busy_until = time.perf_counter() + 10
    while time.perf_counter() < busy_until:
        measure_ceilings(dtype)
    rounds("after 10 s of GEMMs")
    for count, length in ((4, 2048), (32, 256)):
        time_case(library_case("cudnn", count, length, dtype))
        time_case(split_case(count, length, dtype))
    rounds("after cuDNN at B=4 new=2048 and B=32 new=256")
    time_case(library_case("flash", 1, 8192, dtype))
    rounds("after flash at B=1 new=8192")
    launch = {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 3, "tma": True}
    time_case(fresh_case(1, 8192, launch | {"warp_specialize": False}, dtype))
    rounds("after the Triton fresh-prompt kernel")
    result["rows"] = rows
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
