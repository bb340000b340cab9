"""The decode-heavy load (configs/llama3-8b-decode.yaml: 256 streams of 128 in / 256 out) three ways: the
bundled engine in-process, and through HTTP against `llmbench serve` (backend.type server) with
engine.process_split off and on. Writes OUT/serving.json with output tok/s, TPOT, ITL and GPU busy per
variant, the HTTP/in-process throughput ratios and the command.

GPU busy: every variant has its step log (a server's through its /step_records/drain), so each gets
the usual step-span union (gpu_busy_step_spans). Beside it, the server's /metrics histogram
llmbench:step_gpu_ms is read before the first and after the last timed trial, and every variant
gets that comparable figure too: step GPU ms summed over the timed trials / their duration.

    python benchmarks/h200_serving.py runs/h200 [--repeat 3] [--set key=value ...]

Takes 4-6 minutes on an H200 with --repeat 3 (benchmarks/h200_serving.sh runs it so). Writes
OUT_DIR/serving.json; the published one is docs/measurements/h200/serving.json."""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import time
from pathlib import Path

import httpx
from llmbench.engine.serving.engine_loop import RECORDS_EVERY_S

from llmbench.backends.server import ServerBackend
from llmbench.config.load import load_config
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark

CONFIG = "configs/llama3-8b-decode.yaml"
TARGET = 0.95  # HTTP with the split on, over in-process output throughput
KEYS = ("output_throughput", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_ttft_ms")


class _MeteredServer(ServerBackend):
    """The server backend, reading the server's summed step GPU ms after the warm-up and before it stops."""

    gpu_ms: list[float | None]

    def start(self, config) -> None:
        super().start(config)
        self.gpu_ms = []

    def drain_step_records(self) -> list:
        if not self.gpu_ms:  # the runner drains once after the warm-up: the timed trials start here
            self.gpu_ms.append(self._step_gpu_ms())
        return super().drain_step_records()  # the server's steps: its GPU busy from step spans too

    def close(self) -> None:
        if self._process.poll() is None:
            self.gpu_ms.append(self._step_gpu_ms())
        super().close()

    def _step_gpu_ms(self) -> float | None:
        """None without GPU timing (the histogram has no series until a step observes GPU time). Read
        after the server's step records of the last moments have reached /metrics (no step runs
        meanwhile: the warm-up is over, or the trials are)."""
        time.sleep(RECORDS_EVERY_S + 0.5)
        try:
            text = httpx.get(f"{self.url}/metrics", timeout=10.0).text
        except httpx.HTTPError:
            return None
        match = re.search(r"^llmbench:step_gpu_ms_sum\{[^}]*\} (\S+)$", text, re.M)
        return float(match.group(1)) if match else None


def _figures(summary: RunSummary, gpu_ms: float | None) -> dict:
    trials = summary.trials or [summary.metrics]
    duration_s = sum(t.duration_s for t in trials)
    figures = {key: summary.metrics.value(key) for key in KEYS}
    figures["completed"] = sum(t.completed for t in trials)
    figures["failed"] = sum(t.failed for t in trials)
    steps = summary.steps
    if gpu_ms is None and steps.mean_gpu_ms is not None:
        gpu_ms = steps.mean_gpu_ms * steps.num_steps
    figures["gpu_busy_step_gpu_ms_over_duration"] = gpu_ms / 1e3 / duration_s if gpu_ms else None
    figures["gpu_busy_step_spans"] = steps.value("gpu_busy_step_spans")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    # `timeout` ends the script with SIGTERM: as Ctrl-C, so the runs keep their results and the servers stop
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    work = args.out / "serving-runs"
    result = {"command": " ".join(["python", *sys.argv]), "config": CONFIG, "repeat": args.repeat}
    variants = {}
    # the servers first: their processes free the GPU when they stop, while the in-process engine's
    # memory would stay cached in this process and starve a server's KV cache
    for name, settings in (
        ("HTTP, split off", ["backend.type=server", "engine.process_split=false"]),
        ("HTTP, split on", ["backend.type=server", "engine.process_split=true"]),
        ("bundled in-process", ["backend.type=bundled", "engine.process_split=false"]),
    ):
        config = load_config(CONFIG, [*args.overrides, *settings])
        backend = _MeteredServer() if config.backend.type == "server" else None
        started = time.perf_counter()
        if backend is not None:
            backend.start(config)
        run_dir = work / re.sub(r"\W+", "-", name).strip("-")
        run = run_benchmark(config, run_dir, repeat=args.repeat, backend=backend, replace=True)
        marks = backend.gpu_ms if backend else []
        gpu_ms = marks[1] - (marks[0] or 0.0) if len(marks) == 2 and marks[1] is not None else None
        variants[name] = {**_figures(run.summary, gpu_ms), "wall_s": time.perf_counter() - started}
        logging.info("%s: %s", name, variants[name])
    result["variants"] = dict(sorted(variants.items(), key=lambda item: not item[0].startswith("bundled")))
    variants = result["variants"]
    base = variants["bundled in-process"]["output_throughput"]
    for name in ("HTTP, split off", "HTTP, split on"):
        variants[name]["vs_in_process"] = variants[name]["output_throughput"] / base
    on, off = variants["HTTP, split on"], variants["HTTP, split off"]
    result["split_gain"] = on["output_throughput"] / off["output_throughput"]
    result["target"] = {"http_split_on_vs_in_process": TARGET, "met": on["vs_in_process"] >= TARGET}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serving.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, v in variants.items():
        print(
            f"{name:<20} {v['output_throughput']:>9.0f} tok/s  TPOT {v['mean_tpot_ms']:.2f} ms  "
            f"ITL {v['mean_itl_ms']:.2f} ms  GPU busy {v['gpu_busy_step_gpu_ms_over_duration'] or 0:.1%}  "
            f"{v.get('vs_in_process', 1):.3f}x"
        )
    print(f"split gain {result['split_gain']:.3f}x; target >= {TARGET} met: {result['target']['met']}")


if __name__ == "__main__":
    main()
