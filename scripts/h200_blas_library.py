"""The model's linears under each cuBLAS entry point torch can route a bf16 matmul to (cublas:
cublasGemmEx, cublaslt: cublasLtMatmul with its heuristic), at a decode batch's 256 rows and a
prefill step's 8,192, timed as `llmbench kernels` times them (graph of rotated inputs, median).
Also the rows a shrinking decode batch passes through. Writes microseconds and TFLOP/s per shape.

    python scripts/h200_blas_library.py results/h200/blas_library.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from llmbench.env import command_line
from llmbench.kernel_bench import measure_ceilings, time_case
from llmbench.kernel_cases import DECODE_ROWS, PREFILL_ROWS, linear_cases

LIBRARIES = ("cublas", "cublaslt")
ROWS = (64, 128, 192, DECODE_ROWS, PREFILL_ROWS)


def main(out: Path) -> None:
    dtype = torch.bfloat16
    ceilings = measure_ceilings(dtype)
    rows_out = []
    for rows in ROWS:
        for case in linear_cases(rows, dtype):
            row = {"kernel": case.kernel, "shape": case.shape}
            for library in LIBRARIES:
                torch.backends.cuda.preferred_blas_library(library)
                us, _ = time_case(case)
                row[f"{library}_us"] = us
                row[f"{library}_tflop_per_s"] = case.work / us / 1e6
            row["cublaslt_speedup"] = row["cublas_us"] / row["cublaslt_us"]
            rows_out.append(row)
            print(
                f"{case.kernel:22s} {case.shape:22s} cublas {row['cublas_us']:8.1f} us "
                f"cublaslt {row['cublaslt_us']:8.1f} us  x{row['cublaslt_speedup']:.3f}",
                flush=True,
            )
    torch.backends.cuda.preferred_blas_library("cublas")
    result = {
        "command": command_line(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "ceilings": ceilings,
        "rows": rows_out,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
