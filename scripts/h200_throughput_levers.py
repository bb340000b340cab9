"""Two levers on the throughput workload (256 prompts of 256 tokens, 128 outputs each), timed as `llmbench
kernels` times a case (graph of rotated inputs, median):

- attention in its prefill steps: 32 fresh 256-token prompts and the decodes of the prompts admitted
  before them (0, 128 or 224), in the paged kernel's one launch, split (decodes to the decode kernel),
  split with SDPA for the prompts (prefill_attention sdpa), and cuDNN alone on the prompts;
- the decode batch's gate-up GEMM (N = 2 x 14336, K = 4096) at the rows a decode batch passes through:
  one GEMM over the fused weight against two over its gate and up halves (a 256 x 128 tile grid of 224
  tiles is 1.7 waves on 132 multiprocessors; each half's 112 tiles fit in one).

    python scripts/h200_throughput_levers.py results/h200/throughput_levers.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from llmbench.env import command_line
from llmbench.kernel_bench import measure_ceilings, time_case
from llmbench.kernel_cases import HIDDEN, INTERMEDIATE, Case, prefill_case
from llmbench.kernel_cases_sdpa import library_case, mixed_paged_case, split_case

PROMPTS, PROMPT_TOKENS = 32, 256
DECODES = (0, 128, 224)
GEMM_ROWS = (256, 224, 192, 128)


def attention_cases(dtype: torch.dtype) -> list[Case]:
    cases = [library_case("cudnn", PROMPTS, PROMPT_TOKENS, dtype)]
    for decodes in DECODES:
        if decodes:
            cases.append(mixed_paged_case(PROMPTS, PROMPT_TOKENS, decodes, dtype))
            cases.append(split_case(PROMPTS, PROMPT_TOKENS, dtype, decodes, "paged"))
        else:
            cases.append(prefill_case(PROMPTS, PROMPT_TOKENS, 0, dtype))
        cases.append(split_case(PROMPTS, PROMPT_TOKENS, dtype, decodes, "sdpa"))
    return cases


def gate_up_cases(rows: int, dtype: torch.dtype) -> list[Case]:
    n = 2 * INTERMEDIATE
    flops = 2 * rows * n * HIDDEN
    footprint = (n * HIDDEN + rows * (n + HIDDEN)) * dtype.itemsize

    def make(halves: bool):
        x = torch.randn(rows, HIDDEN, device="cuda", dtype=dtype)
        weight = torch.randn(n, HIDDEN, device="cuda", dtype=dtype)
        if not halves:
            return lambda: F.linear(x, weight)
        gate, up = weight[:INTERMEDIATE], weight[INTERMEDIATE:]
        return lambda: (F.linear(x, gate), F.linear(x, up))

    shape = f"M={rows} N={n} K={HIDDEN}"
    return [
        Case("gate_up one GEMM", shape, "compute", flops, footprint, lambda: make(False)),
        Case("gate_up two halves", shape, "compute", flops, footprint, lambda: make(True)),
    ]


def main(out: Path) -> None:
    dtype = torch.bfloat16
    torch.manual_seed(0)
    ceilings = measure_ceilings(dtype)
    rows = []
    cases = attention_cases(dtype) + [c for r in GEMM_ROWS for c in gate_up_cases(r, dtype)]
    for case in cases:
        us, sets = time_case(case)
        tflops = case.work / us / 1e6
        rows.append({"kernel": case.kernel, "shape": case.shape, "us": us, "tflop_per_s": tflops})
        rows[-1] |= {"fraction_of_ceiling": tflops / ceilings["gemm_tflop_per_s"], "input_sets": sets}
        print(f"{case.kernel:34s} {case.shape:36s} {us:8.1f} us {tflops:6.1f} TFLOP/s", flush=True)
        torch.cuda.empty_cache()
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
