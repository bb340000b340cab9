"""Five quickstart runs back to back, alternating the environment they start in (OMP_NUM_THREADS unset,
then set to 1), to show that the CPU numbers come from hardware.cpu_threads and not from the shell:
each run's output throughput goes to runs/cpu/quickstart_stability.json with the machine's load.

    python3 benchmarks/quickstart_stability.py [--runs 5] [--out runs/cpu/quickstart_stability.json]

Takes about two minutes on the 2-core CPU (111 s at a load average of 17). Writes --out FILE (default
runs/quickstart_stability.json); the published one is docs/measurements/cpu/quickstart_stability.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmbench.results.files import write_atomic
from llmbench.results.summary import RunSummary

log = logging.getLogger("quickstart_stability")
COMMAND = [sys.executable, "-m", "llmbench", "run", "quickstart", "--no-report"]


def run_once(index: int, scratch: Path) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if index % 2:
        env["OMP_NUM_THREADS"] = "1"
    out = scratch / f"run-{index}"
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run([*COMMAND, "--out", str(out)], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    summary = RunSummary.load(out)
    metrics = summary.metrics
    row = {
        "omp_num_threads_env": env.get("OMP_NUM_THREADS"),
        "torch_threads": summary.environment.torch_threads,
        "output_throughput": metrics.output_throughput,
        "mean_ttft_ms": metrics.latencies.mean_ttft_ms,
        "duration_s": metrics.duration_s,
        "wall_s": wall,
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
    }
    log.info(
        "run %d: %.1f out tok/s, mean TTFT %.2f ms, %.1f s",
        index + 1,
        *(row[k] for k in ("output_throughput", "mean_ttft_ms", "wall_s")),
    )
    return row


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs/cpu/quickstart_stability.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        runs = [run_once(i, Path(scratch)) for i in range(args.runs)]
    throughputs = [r["output_throughput"] for r in runs]
    median = statistics.median(throughputs)
    spread = (max(throughputs) - min(throughputs)) / median
    result = {
        "command": shlex.join(["llmbench", *COMMAND[3:]]) + " --out DIR (alternately with OMP_NUM_THREADS=1)",
        "script": "python3 benchmarks/quickstart_stability.py",
        "cpu_cores": os.cpu_count(),
        "runs": runs,
        "median_output_throughput": median,
        "spread_of_median": spread,  # (max - min) / median
        "within_10_percent": spread <= 0.10,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(result, indent=2) + "\n")
    log.info("median %.1f out tok/s, spread %.1f%% of it: %s", median, spread * 100, args.out)


if __name__ == "__main__":
    main()
