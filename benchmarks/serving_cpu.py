"""The serving layer's CPU cost per streamed token, on any machine: configs/ablation-cpu.yaml (null
executor, Llama-3-8B shapes, 256 concurrent streams of 128 in / 256 out) through HTTP against
`llmbench serve` (backend.type server, process_split on unless --set says otherwise) beside the bundled
engine in-process. The server process's CPU (/proc utime + stime, every thread of it; with the split
the core is another process and not counted) over the timed trials, divided by the tokens streamed;
beside it the benchmark client's (this process's) the same way.

    OMP_NUM_THREADS=1 python benchmarks/serving_cpu.py runs/cpu/serving_cpu.json [--repeat 3] [--set k=v]

Run from the tree being measured: the server subprocess imports the package from the current directory.
To compare trees (say two `git worktree`s), --trees LABEL=DIR ... measures each --runs times,
interleaved (run 1 of every tree, then run 2, ...), each run this script on that tree's packages, and
writes every run's rows with each tree's commit:

    OMP_NUM_THREADS=1 python benchmarks/serving_cpu.py OUT.json --trees before=DIR after=DIR --runs 3

Takes about 25 s a run on the 2-core CPU (23 s at a load average of 13); with --trees, that times the
trees times --runs. Writes OUT.json; the published ones are docs/measurements/cpu/serving_cpu_trees_*.json."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llmbench.backends.server import ServerBackend
from llmbench.config.load import load_config
from llmbench.run.runner import run_benchmark

CONFIG = "configs/ablation-cpu.yaml"
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime


class _MeteredServer(ServerBackend):
    """The server backend, reading the server's CPU after the warm-up and before it stops."""

    def start(self, config) -> None:
        super().start(config)
        self.cpu_s: list[float] = []

    def drain_step_records(self) -> list:
        if not self.cpu_s:  # the runner drains once after the warm-up: the timed trials start here
            self.cpu_s.append(cpu_seconds(self._process.pid))
            self.client_s = [_own_cpu_seconds()]
        return []

    def close(self) -> None:
        if self._process.poll() is None:
            self.cpu_s.append(cpu_seconds(self._process.pid))
            self.client_s.append(_own_cpu_seconds())
        super().close()


def _own_cpu_seconds() -> float:
    """This process's CPU: during the HTTP trials, the benchmark client's (runner and stream threads)."""
    times = os.times()
    return times.user + times.system


def measure(overrides: list[str], repeat: int) -> dict:
    config = load_config(CONFIG, overrides)
    backend = _MeteredServer() if config.backend.type == "server" else None
    if backend is not None:
        backend.start(config)
    with tempfile.TemporaryDirectory(prefix="serving-cpu-") as run_dir:
        run = run_benchmark(config, Path(run_dir), repeat=repeat, backend=backend, replace=True)
    metrics = run.summary.metrics
    trials = run.summary.trials or [metrics]
    tokens = sum(t.total_output_tokens for t in trials)
    row = {
        "output_throughput": metrics.output_throughput,
        "mean_itl_ms": metrics.latencies.mean_itl_ms,
        "p99_itl_ms": metrics.value("p99_itl_ms"),
        "mean_ttft_ms": metrics.latencies.mean_ttft_ms,
        "total_output_tokens": tokens,
    }
    if backend is not None and len(backend.cpu_s) == 2:
        server_s = backend.cpu_s[1] - backend.cpu_s[0]
        row["server_cpu_s"] = round(server_s, 3)
        row["server_cpu_us_per_token"] = round(server_s / tokens * 1e6, 2)
        client_s = backend.client_s[1] - backend.client_s[0]
        row["client_cpu_us_per_token"] = round(client_s / tokens * 1e6, 2)
    return row


def compare(trees: list[str], runs: int, repeat: int, overrides: list[str]) -> dict:
    """Every tree's rows per run, the trees interleaved; each run is this script, run on that tree's
    packages (its own copy may predate --trees and the figures read here)."""
    dirs = dict(tree.split("=", 1) for tree in trees)
    result = {label: {"tree": path, "commit": _commit(path), "runs": []} for label, path in dirs.items()}
    sets = [arg for item in overrides for arg in ("--set", item)]
    with tempfile.TemporaryDirectory(prefix="serving-cpu-trees-") as scratch:
        for run in range(runs):
            for label, path in dirs.items():
                out = Path(scratch) / f"{label}-{run}.json"
                command = [sys.executable, __file__, str(out), "--repeat", str(repeat), *sets]
                # the tree's packages first, ahead of an editable install of another checkout
                env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
                subprocess.run(command, cwd=path, env=env, check=True, stdout=subprocess.DEVNULL)
                result[label]["runs"].append(json.loads(out.read_text())["rows"])
    return result


def _commit(tree: str) -> str:
    return subprocess.run(
        ["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--trees", nargs="+", metavar="LABEL=DIR")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.trees:
        trees = compare(args.trees, args.runs, args.repeat, args.overrides)
        result = {"command": " ".join(["python", *sys.argv]), "config": CONFIG, "trees": trees}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        for label, tree in trees.items():
            print(label, [run["HTTP"].get("server_cpu_us_per_token") for run in tree["runs"]])
        return
    server = ["backend.type=server", "engine.process_split=true", *args.overrides]
    rows = {
        "HTTP": measure(server, args.repeat),
        "bundled in-process": measure(["backend.type=bundled", *args.overrides], args.repeat),
    }
    rows["HTTP"]["vs_in_process"] = round(
        rows["HTTP"]["output_throughput"] / rows["bundled in-process"]["output_throughput"], 3
    )
    result = {"command": " ".join(["python", *sys.argv]), "config": CONFIG, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
