"""The step figures of the run directories an interleaved A/B left (benchmarks/interleaved_ab.sh with
`llmbench run ... --out {out}`), in one JSON file: each run's host phases, GPU busy and idle, and
throughput, TPOT, TTFT and E2EL, the prompt tokens the server found cached and its prefix-cache hit
rate (and a multi-turn run's TTFT by turn), then each side's median and
range. Beside the run's means (which count its prefill steps too), the medians of its steady decode
steps from steps.csv: those running the run's largest decode batch and no prompt token.

    python benchmarks/ab_summaries.py runs/h200/ab_runs runs/h200/ab.json

Reads run directories only: takes seconds. Writes the JSON file named (FILE); the published ones are
docs/measurements/h200/graph_sizes/*.json, docs/measurements/h200/throughput_ab/decode_launch_ab.json and
docs/measurements/h200/field/{poisson32,multiturn,warmcache}.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pandas

from llmbench.device.environment import command_line
from llmbench.metrics.steps import CPU_PHASES
from llmbench.results.summary import RunSummary

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


METRIC_FIGURES = (
    "output_throughput",
    "request_throughput",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_e2el_ms",
    "total_input_tokens",
    "cached_prompt_tokens",
    "warm_cache_requests",
)

DECODE_FIGURES = ("decode_host_ms", "decode_schedule_ms", "decode_prepare_ms", "decode_output_ms")


def steady_decode_figures(steps_csv: Path) -> dict:
    """Medians over the steps that decode the run's largest batch and run no prompt token: host
    phases, and their sum as the step's host time. None for a run without engine steps (a server
    measured over HTTP)."""
    if not steps_csv.exists() or steps_csv.stat().st_size == 0:
        return {"decode_steps": 0} | dict.fromkeys(DECODE_FIGURES)
    steps = pandas.read_csv(steps_csv)
    steps = steps[steps.num_prefill_tokens == 0]
    steps = steps[steps.num_decode_seqs == steps.num_decode_seqs.max()]
    host = steps[list(CPU_PHASES)].sum(axis=1)
    figures = {"decode_steps": len(steps), "decode_host_ms": float(host.median())}
    for phase in ("schedule", "prepare", "output"):
        figures[f"decode_{phase}_ms"] = float(steps[f"{phase}_ms"].median())
    return figures


def run_figures(run_dir: Path) -> dict:
    summary = RunSummary.load(run_dir)
    figures = {name: summary.steps.value(name) for name in STEP_FIGURES}
    figures |= {name: summary.metrics.value(name) for name in METRIC_FIGURES}
    figures |= steady_decode_figures(run_dir / "steps.csv")
    # what a prefix cache warmed before the trial gave it: the server's hit rate and the run's warning
    server = summary.server_metrics
    hit_rate = getattr(server, "prefix_cache_hit_rate_by_trial", None) if server else None
    figures["server_prefix_cache_hit_rate"] = hit_rate[0] if hit_rate else None
    figures["warm_cache_warned"] = bool(summary.warnings)
    # a multi-turn run's TTFT by turn: later turns resend the history, which a prefix cache holds
    for turn, metrics in (summary.turns or {}).items():
        figures[f"turn{turn}_median_ttft_ms"] = metrics.latencies.median_ttft_ms
    figures["command"] = summary.environment.command
    return figures


def main(runs: Path, out: Path) -> None:
    rows = {
        path.name: run_figures(path) for path in sorted(runs.iterdir()) if (path / "summary.json").exists()
    }
    sides = {}
    for side in ("A", "B"):
        mine = [row for name, row in rows.items() if name.startswith(f"{side}_")]
        names = dict.fromkeys(name for row in mine for name in row if name != "command")
        sides[side] = {
            name: {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for name in names
            if (values := [row[name] for row in mine if row.get(name) is not None])
        }
    result = {"command": f"python benchmarks/{command_line()}", "runs": rows, "sides": sides}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for side, figures in sides.items():
        print(side, {name: round(value["median"], 4) for name, value in figures.items()})


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
