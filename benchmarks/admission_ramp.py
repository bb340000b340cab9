"""How fast a run's requests reach the engine through HTTP, from run directories of a `backend.type:
server` run (the per-request join gives each request's engine-side t_queued): mean TTFT, when the
first and the last request were admitted after the first submit, and the output throughput. Written to
one JSON file with this command and each run's own.

    python benchmarks/admission_ramp.py runs/cpu/admission_ramp.json LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Reads run directories only: takes seconds. Writes OUT.json; the published one is
docs/measurements/cpu/admission_ramp.json."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary


def ramp(run_dir: Path) -> dict:
    rows = [r for r in load_requests(run_dir) if not r.warmup and r.server_timestamps]
    start = min(r.submit_time for r in rows)
    queued = [r.server_timestamps["t_queued"] - start for r in rows]
    summary = RunSummary.load(run_dir)
    return {
        "run_command": summary.environment.command,
        "git_commit": summary.environment.git_commit,
        "requests": len(rows),
        "mean_ttft_ms": statistics.mean(r.first_token_time - r.submit_time for r in rows) * 1e3,
        "first_admitted_ms": min(queued) * 1e3,
        "last_admitted_ms": max(queued) * 1e3,
        "output_throughput": summary.metrics.output_throughput,
    }


def main() -> None:
    out, pairs = Path(sys.argv[1]), [arg.split("=", 1) for arg in sys.argv[2:]]
    runs = {label: ramp(Path(run_dir)) for label, run_dir in pairs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "runs": runs}, indent=2) + "\n")
    for label, run in runs.items():
        print(
            f"{label}: mean TTFT {run['mean_ttft_ms']:.0f} ms, admitted {run['first_admitted_ms']:.0f}-"
            f"{run['last_admitted_ms']:.0f} ms after the first submit, {run['output_throughput']:,.0f} tok/s"
        )


if __name__ == "__main__":
    main()
