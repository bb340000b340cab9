"""Does the decode batch's gate-up GEMM lose its rate to wave quantization? At 256 rows cuBLAS runs it
(N=28672, K=4096) at about 87% of the GEMM ceiling with a 256x128 tile: 224 tiles on 132
multiprocessors, a second wave 70% full. This times M=256, K=4096 GEMMs over widths N that give
whole and partial waves of 128-wide tiles (16896 = 132 tiles, 33792 = 264), as `llmbench kernels`
times a linear (graph of rotated inputs, median), and names the kernel cuBLAS picked for each (torch
profiler). If the rate follows the last wave's fill, the gap is the tiling's, not the memory system's.

    python scripts/h200_gemm_waves.py results/h200/gemm_waves.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from llmbench.kernels import triton_ops

from llmbench.env import command_line
from llmbench.kernel_bench import measure_ceilings, time_case
from llmbench.kernel_cases import Case

ROWS, K = 256, 4096
WIDTHS = (8448, 14336, 16896, 20480, 24576, 28672, 30720, 33792, 36864)


def kernel_names(call) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            call()
        torch.cuda.synchronize()
    return sorted({event.key for event in prof.key_averages()})


def main(out: Path) -> None:
    dtype = torch.bfloat16
    ceilings = measure_ceilings(dtype)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for n in WIDTHS:

        def make(n: int = n):
            x = torch.randn(ROWS, K, device="cuda", dtype=dtype)
            weight = torch.randn(n, K, device="cuda", dtype=dtype)
            return lambda: triton_ops.linear(x, weight)

        case = Case(
            f"linear N={n}",
            f"M={ROWS} N={n} K={K}",
            "compute",
            2 * ROWS * n * K,
            (n * K + ROWS * (n + K)) * 2,
            make,
        )
        us, sets = time_case(case)
        tflops = case.work / us / 1e6
        row = {
            "n": n,
            "us": us,
            "tflop_per_s": tflops,
            "fraction_of_ceiling": tflops / ceilings["gemm_tflop_per_s"],
            "waves_of_256x128_tiles": n / 128 / num_sms,
            "kernels": kernel_names(make()),
            "input_sets": sets,
        }
        rows.append(row)
        print(
            f"N={n:6d} {us:8.1f} us {tflops:6.1f} TFLOP/s {row['fraction_of_ceiling']:.3f} "
            f"waves {row['waves_of_256x128_tiles']:.2f} {row['kernels']}",
            flush=True,
        )
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "num_sms": num_sms, "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
