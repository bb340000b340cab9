"""The CI gate's wall-time mode (scripts/perf_gate.sh --mode wall): interleaved runs of one config by a
baseline tree and a current tree on the same machine, folded into trials for `llmbench compare`. It sees
what instruction counts cannot (waits, syscalls, a GPU) and pays for it with the machine's noise.

Each tree gets one long-lived worker process that runs `llmbench run CONFIG` with that tree's own code
whenever asked, so a run costs its workload (~0.3 s for configs/ci.yaml) rather than a Python and torch
start (~2.5 s). Runs alternate between the sides in pairs, the order flipping every pair (A B, B A, ...)
so neither side always runs first, and both sides see the same load on a shared machine.

The figure gated is CPU ms per step. On shared cores a step is now and then descheduled or slowed by
a neighbour, adding up to milliseconds to a 0.07-0.25 ms step, and a run's mean CPU ms per step varied by
20% between A/A runs under load. The null executor's steps are deterministic (the same batches in the same
order every run), so each side's figure is the mean over steps of the lower quartile of its runs at
each step: the interruptions, which hit a few runs at any one step, fall out, every step keeps its
weight, and a slowdown of all steps, or of some, moves it by exactly its share of the mean. The
quartile, not the fastest run: the machine's speed also drifts through a gate (on the 2-core project
machine the first runs after a pause were the fastest), and the fastest runs are then the first few,
one side's more than the other's; a quartile of runs that alternate sits well inside the
gate for both sides. Not the median either: where interruptions are frequent, a half of the runs may
hold several interrupted ones at a step. Its interval comes from random halves of the side's runs."""

from __future__ import annotations

import csv
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from llmbench.gate.compare import (
    INCONCLUSIVE,
    MetricCheck,
    Verdict,
    decide,
    flag_served_nothing,
)
from llmbench.metrics.trial_stats import bootstrap_ratios
from llmbench.results.summary import RunSummary

log = logging.getLogger(__name__)

METRIC = "steps.mean_cpu_ms_per_step"
MAX_ROUNDS = 3  # of --pairs pairs each, while the noise leaves the verdict unresolved
_CPU_PHASES = ("schedule_ms", "prepare_ms", "output_ms", "ipc_ms")  # steps.csv's cpu_ms, for older trees

# run by `python3 -c` in a tree's root, so the tree's own llmbench is the one imported; the run's table
# and logs go to stderr (a log file), stdout only answers each request with the run's exit code
_WORKER = """
import sys
# an editable install of another checkout must not fill in a module this tree lacks
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
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


def measure(
    trees: dict[str, Path], config: str, pairs: int, work: Path, first: int = 0
) -> dict[str, list[Path]]:
    """`pairs` runs per side, alternating, after one untimed run each; the run directories by side,
    numbered from `first` (a later round of the same gate numbers on)."""
    work.mkdir(parents=True, exist_ok=True)
    workers = {side: _Worker(tree, config, work / f"{side}-{first:02d}.log") for side, tree in trees.items()}
    runs: dict[str, list[Path]] = {side: [] for side in trees}
    try:
        for side, worker in workers.items():
            worker.run(work / "warmup" / f"{side}-{first:02d}")  # first-run costs (lazy imports) stay out
        sides = list(trees)
        for k in range(first, first + pairs):
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


def side_costs(run_dirs: list[Path]) -> np.ndarray | None:
    """CPU ms of every timed step, one row per run; None when the runs' steps do not line up (a
    workload that is not deterministic)."""
    runs = [np.concatenate(step_cpu_ms(run)) for run in run_dirs]
    if len({run.size for run in runs}) != 1:
        log.warning("the runs' steps differ in number: judging run means instead of the quartile steps")
        return None
    return np.stack(runs)


def quartile_step_mean(costs: np.ndarray) -> float:
    """Mean over steps of the lower quartile of the runs at each step."""
    return float(np.quantile(costs, 0.25, axis=0).mean())


def bootstrap_quartile_steps(costs: np.ndarray, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """quartile_step_mean of random halves of the runs (drawn without replacement), `resamples` times
    (seeded). Halves rather than the usual resampling with replacement: a resample that repeats two or
    three runs gives their interruptions the weight of a majority, and such draws gave the interval a
    tail many times the noise. A half always holds K/2 distinct runs; for a figure averaged over runs
    its spread is the full set's (balanced half-samples), for this quartile a little wider."""
    rng = np.random.default_rng(seed)
    half = max(1, (len(costs) + 1) // 2)
    picks = np.argsort(rng.random((resamples, len(costs))), axis=1)[:, :half]
    # in chunks: resamples x runs x steps at once would be ~100 MB for the CI config
    chunks = np.array_split(picks, 20)
    return np.concatenate([np.quantile(costs[chunk], 0.25, axis=1).mean(axis=1) for chunk in chunks])


def judge(runs: dict[str, list[Path]], check: MetricCheck) -> list[Verdict]:
    """The gate's verdicts: CPU ms per step beyond the check's threshold and the noise, or a side that
    completed no request in some run."""
    base, cur = side_costs(runs["baseline"]), side_costs(runs["current"])
    counts = (len(runs["baseline"]), len(runs["current"]))
    if base is None or cur is None:
        means = [[float(np.concatenate(step_cpu_ms(r)).mean()) for r in runs[side]] for side in runs]
        ratios = bootstrap_ratios(*means)
        verdict = decide(check, float(np.median(means[0])), float(np.median(means[1])), ratios, None, counts)
    else:
        ratios = bootstrap_quartile_steps(cur, seed=1) / bootstrap_quartile_steps(base, seed=0)
        verdict = decide(check, quartile_step_mean(base), quartile_step_mean(cur), ratios, None, counts)
    served = (_fewest_completed(runs["baseline"]), _fewest_completed(runs["current"]))
    return flag_served_nothing([verdict], served, (False, False))


def measure_and_judge(
    measure_round: Callable[[int], dict[str, list[Path]]], check: MetricCheck
) -> tuple[dict[str, list[Path]], list[Verdict]]:
    """Rounds of runs (measure_round(first run's number) -> run directories by side) until the verdict is
    resolved, at most MAX_ROUNDS: on a shared machine the noise comes and goes, and a round that could
    not judge (not enough trials to catch twice the threshold, or a change past it whose interval still
    reaches inside) is followed by another, judged with the runs before it, rather than ending the gate
    at once. A decided verdict ends the measuring."""
    runs: dict[str, list[Path]] = {}
    for _ in range(MAX_ROUNDS):
        more = measure_round(len(runs.get("baseline", [])))
        runs = {side: runs.get(side, []) + more[side] for side in more}
        verdicts = judge(runs, check)
        if not any(v.verdict in INCONCLUSIVE for v in verdicts):
            break
    return runs, verdicts


def _fewest_completed(run_dirs: list[Path]) -> int:
    metrics = [RunSummary.load(run).metrics for run in run_dirs]
    return min(m.completed if m is not None else 0 for m in metrics)
