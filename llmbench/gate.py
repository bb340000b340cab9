"""The measuring half of the CI regression gate (scripts/perf_gate.sh): interleaved runs of one config
by a baseline tree and a current tree on the same machine, folded into trials for `llmbench compare`.

Each tree gets one long-lived worker process that runs `llmbench run CONFIG` with that tree's own code
whenever asked, so a run costs its workload (~0.3 s for configs/ci.yaml) rather than a Python and torch
start (~2.5 s). Runs alternate between the sides in pairs, the order flipping every pair (A B, B A, ...)
so neither side always runs first, and both sides see the same load on a shared machine.

The figure gated is CPU ms per step. On shared cores a step is now and then descheduled mid-phase,
adding milliseconds to a 0.07 ms step, and a run's mean CPU ms per step varied by 20% between A/A runs
under load. The null executor's steps are deterministic (same batches in the same order every run), so
a trial is a group of consecutive runs of one side whose value is the mean over steps of the fastest of
the group's runs at each step: the interruptions fall out, every step keeps its weight, and a slowdown
of every step, or of some, moves it by exactly its share of the mean."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

METRIC = "steps.mean_cpu_ms_per_step"
_CPU_PHASES = ("schedule_ms", "prepare_ms", "output_ms", "ipc_ms")  # steps.csv's cpu_ms, for older trees

# run by `python3 -c` in a tree's root, so the tree's own llmbench is the one imported; the run's table
# and logs go to stderr (a log file), stdout only answers each request with the run's exit code
_WORKER = """
import sys
answer, sys.stdout = sys.stdout, sys.stderr
from llmbench.cli import app
for line in sys.stdin:
    try:
        code = app(["run", sys.argv[1], "--out", line.strip(), "--no-report"], standalone_mode=False)
    except SystemExit as e:
        code = e.code
    print(code or 0, file=answer, flush=True)
"""


class GateError(RuntimeError):
    """A side could not run the config: the gate cannot measure (exit code 2)."""


class _Worker:
    def __init__(self, tree: Path, config: str, log_file: Path):
        self.tree = tree
        self._log = open(log_file, "w")
        self._process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, config],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def run(self, out: Path) -> int:
        self._process.stdin.write(f"{out}\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        if not answer:
            raise GateError(f"{self.tree}: the worker died running {out}; see {self._log.name}")
        return int(answer)

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait()
        self._log.close()


def measure(trees: dict[str, Path], config: str, pairs: int, work: Path) -> dict[str, list[Path]]:
    """`pairs` runs per side, alternating, after one untimed run each; the run directories by side."""
    work.mkdir(parents=True, exist_ok=True)
    workers = {side: _Worker(tree, config, work / f"{side}.log") for side, tree in trees.items()}
    runs: dict[str, list[Path]] = {side: [] for side in trees}
    try:
        for side, worker in workers.items():
            worker.run(work / "warmup" / side)  # first-run costs (lazy imports, allocations) stay out
        sides = list(trees)
        for k in range(pairs):
            for side in sides if k % 2 == 0 else sides[::-1]:
                out = work / side / f"{k:02d}"
                code = workers[side].run(out)
                if not (out / "steps.csv").is_file():
                    raise GateError(f"{trees[side]}: `llmbench run {config}` exited {code} without steps.csv")
                runs[side].append(out)
    finally:
        for worker in workers.values():
            worker.close()
    return runs


def step_cpu_ms(run_dir: Path) -> list[np.ndarray]:
    """CPU ms of every timed step of a run, one array per trial, in step order."""
    by_trial: dict[int, list[float]] = {}
    with open(run_dir / "steps.csv", newline="") as f:
        for row in csv.DictReader(f):
            cpu = row.get("cpu_ms") or sum(float(row[phase] or 0) for phase in _CPU_PHASES)
            by_trial.setdefault(int(row["trial"]), []).append(float(cpu))
    return [np.asarray(by_trial[k]) for k in sorted(by_trial)]


def fastest_step_mean(runs: list[list[np.ndarray]]) -> float:
    """Mean over steps of the fastest run at each step. Runs whose steps do not line up (a workload
    that is not deterministic) fall back to the lowest of their means."""
    shapes = {tuple(len(trial) for trial in run) for run in runs}
    if len(shapes) != 1:
        log.warning("the runs' steps differ in number %s: a trial is the lowest run mean", sorted(shapes))
        return min(float(np.concatenate(run).mean()) for run in runs)
    steps = np.stack([np.concatenate(run) for run in runs])
    return float(steps.min(axis=0).mean())


def fold(run_dirs: list[Path], group: int) -> dict[str, Any]:
    """A summary that `llmbench compare` reads: one trial per `group` consecutive runs. `completed` is the
    fewest requests any run completed, so a side that failed every request fails the comparison."""
    if len(run_dirs) < 2 * group:
        raise GateError(f"{len(run_dirs)} runs make fewer than 2 trials of {group}")
    costs = [step_cpu_ms(run) for run in run_dirs]
    trials = [
        {"steps": {"mean_cpu_ms_per_step": fastest_step_mean(costs[i : i + group])}}
        for i in range(0, len(costs) - group + 1, group)
    ]
    summaries = [json.loads((run / "summary.json").read_text()) for run in run_dirs]
    return {
        "name": "perf gate",
        "complete": all(s.get("complete") for s in summaries),
        "metrics": {"completed": min(s["metrics"].get("completed", 0) for s in summaries)},
        "steps": {
            "mean_cpu_ms_per_step": float(np.median([t["steps"]["mean_cpu_ms_per_step"] for t in trials]))
        },
        "trials": trials,
        "runs": [str(run) for run in run_dirs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Interleaved baseline/current runs for the perf gate.")
    parser.add_argument("baseline", type=Path, help="tree whose code is the baseline")
    parser.add_argument("current", type=Path, help="tree whose code is judged")
    parser.add_argument("work", type=Path, help="directory for the runs, baseline.json and current.json")
    parser.add_argument("--config", default="configs/ci.yaml", help="each tree's own config at this path")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--group", type=int, default=4, help="runs per trial")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        runs = measure(
            {"baseline": args.baseline, "current": args.current}, args.config, args.pairs, args.work
        )
        for side, dirs in runs.items():
            (args.work / f"{side}.json").write_text(json.dumps(fold(dirs, args.group), indent=2) + "\n")
    except GateError as e:
        print(f"perf gate: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
