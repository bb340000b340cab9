"""Where a run's GPU idle time goes, by the kind of step it waits for: each idle gap between two steps'
device work (llmbench.metrics.steps.idle_gaps) is charged to the step whose work ends it, as that step's
host phases (and the runner's bookkeeping before it) are what the device waited on. A step is a steady
decode (decodes only, the run's largest batch), a prefill (some prompt tokens), or other (a smaller
batch of decodes: admission ramps and the last steps). Per kind: steps, idle ms, and idle ms per
phase, summed over the runs' trials.

    python benchmarks/idle_by_step_kind.py OUT.json RUN_DIR [RUN_DIR ...]

Reads run directories only: takes seconds. Writes OUT.json; the published one is
docs/measurements/h200/idle_by_step_kind_4fc1970.json."""

from __future__ import annotations

import bisect
import json
import sys
from collections import defaultdict
from pathlib import Path

import pandas

from llmbench.device.environment import command_line
from llmbench.metrics.steps import idle_gaps


def step_kind(row: dict, largest_batch: int) -> str:
    if row["num_prefill_tokens"]:
        return "prefill"
    return "steady decode" if row["num_decode_seqs"] == largest_batch else "other"


def idle_by_kind(run_dir: Path) -> dict:
    steps = pandas.read_csv(run_dir / "steps.csv")
    largest = int(steps.num_decode_seqs.max())
    kinds: dict[str, dict] = defaultdict(lambda: {"steps": 0, "idle_ms": 0.0, "by_phase": {}})
    for _, trial in steps.groupby("trial"):
        rows = sorted(trial.to_dict("records"), key=lambda r: r["gpu_start"])
        starts = [r["gpu_start"] for r in rows]
        for row in rows:
            kinds[step_kind(row, largest)]["steps"] += 1
        for gap in idle_gaps(rows):
            # the step whose device work begins where the gap ends (none after the last: "after last")
            i = bisect.bisect_left(starts, gap["end"] - 1e-9)
            kind = step_kind(rows[i], largest) if i < len(rows) else "after last"
            entry = kinds[kind]
            entry["idle_ms"] += gap["ms"]
            for phase, ms in gap["by_phase"].items():
                entry["by_phase"][phase] = entry["by_phase"].get(phase, 0.0) + ms
    return dict(kinds)


def main(out: Path, run_dirs: list[Path]) -> None:
    result = {"command": f"python benchmarks/{command_line()}", "runs": {}}
    for run_dir in run_dirs:
        kinds = idle_by_kind(run_dir)
        result["runs"][str(run_dir)] = kinds
        for kind, entry in kinds.items():
            per_step = entry["idle_ms"] / entry["steps"] if entry["steps"] else float("nan")
            phases = ", ".join(f"{p} {ms:.1f}" for p, ms in sorted(entry["by_phase"].items()))
            print(
                f"{run_dir.name} {kind}: {entry['steps']} steps, idle {entry['idle_ms']:.1f} ms "
                f"({per_step:.3f} a step; {phases})"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} OUT.json RUN_DIR [RUN_DIR ...]")
    missing = [d for d in sys.argv[2:] if not (Path(d) / "steps.csv").is_file()]
    if missing:
        sys.exit(f"error: no steps.csv in {', '.join(missing)}")
    main(Path(sys.argv[1]), [Path(d) for d in sys.argv[2:]])
