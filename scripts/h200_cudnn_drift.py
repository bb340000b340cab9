"""Does cuDNN's prefill attention keep its speed under sustained load? Times cuDNN's SDPA alone and the
engine's split op (prefill_attention sdpa) at B=1 new=8192 in alternating rounds for about a minute, as
`llmbench kernels` times a case, with the GPU's SM clock, temperature and power from nvidia-smi after
each round. `llmbench kernels` reaches its SDPA rows after a minute of other kernels.

    python scripts/h200_cudnn_drift.py results/h200/cudnn_drift.json
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from llmbench.env import command_line
from llmbench.kernel_bench import measure_ceilings, time_case
from llmbench.kernel_cases_sdpa import library_case, split_case

ROUNDS = 30
QUERY = "clocks.sm,temperature.gpu,power.draw"


def gpu_state() -> dict[str, str]:
    try:
        line = subprocess.run(
            ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    return dict(zip(QUERY.split(","), (v.strip() for v in line.split(",")), strict=False))


def main(out: Path) -> None:
    dtype = torch.bfloat16
    torch.manual_seed(0)
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "idle_state": gpu_state(), "ceilings": measure_ceilings(dtype)}
    cases = [library_case("cudnn", 1, 8192, dtype), split_case(1, 8192, dtype)]
    rows = []
    for round_ in range(ROUNDS):
        for case in cases:
            us, _ = time_case(case)
            tflops = case.work / us / 1e6
            row = {"round": round_, "kernel": case.kernel, "us": us, "tflop_per_s": tflops}
            rows.append(row | gpu_state())
            print(json.dumps(rows[-1]), flush=True)
    result["rows"] = rows
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
