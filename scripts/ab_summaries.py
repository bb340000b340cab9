"""The step figures of the run directories an interleaved A/B left (scripts/interleaved_ab.sh with
`llmbench run ... --out {out}`), in one JSON file: each run's host phases, GPU busy and idle, and
throughput, TPOT and TTFT, then each side's median and range.

    python scripts/ab_summaries.py results/h200/ab_runs results/h200/ab.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from llmbench.env import command_line

STEP_FIGURES = (
    "mean_cpu_ms_per_step",
    "mean_schedule_ms",
    "mean_prepare_ms",
    "mean_output_ms",
    "gpu_busy_step_spans",
    "throughput_of_bound",
    "gpu_idle_during_between_steps_ms",
    "num_gpu_idle_gaps",
)


METRIC_FIGURES = ("output_throughput", "request_throughput", "median_tpot_ms", "median_ttft_ms")


def run_figures(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    figures = {name: summary["steps"].get(name) for name in STEP_FIGURES}
    figures |= {name: summary["metrics"].get(name) for name in METRIC_FIGURES}
    figures["command"] = summary["environment"]["command"]
    return figures


def main(runs: Path, out: Path) -> None:
    rows = {
        path.name: run_figures(path) for path in sorted(runs.iterdir()) if (path / "summary.json").exists()
    }
    sides = {}
    for side in ("A", "B"):
        mine = [row for name, row in rows.items() if name.startswith(f"{side}_")]
        sides[side] = {
            name: {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for name in (*STEP_FIGURES, *METRIC_FIGURES)
            if (values := [row[name] for row in mine if row[name] is not None])
        }
    result = {"command": f"python scripts/{command_line()}", "runs": rows, "sides": sides}
    out.write_text(json.dumps(result, indent=1) + "\n")
    for side, figures in sides.items():
        print(side, {name: round(value["median"], 4) for name, value in figures.items()})


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
