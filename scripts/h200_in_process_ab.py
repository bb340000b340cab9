"""Two ways of running the same engine's steps, compared in one process: blocks of steps take turns
(A B, then B A, ...), so that a GPU host's drift, up to 2x within a minute
(results/h200/host_drift/), falls on both alike, where two processes could not be compared.
256 sequences decoding, single step, every overlap off, CUDA graphs on (scripts/cpu_overhead.py's
engine). Host time per step is schedule + prepare + output, medians per block and side; each block
also times a fixed piece of per-sequence Python (cpu_overhead.host_reference_us), the host's speed.

--compare pinning: the process on every core it may use (A), or on one of them (B): whether moving
between cores makes the host slower.
--compare wait: the host waits for a step's tokens in cudaEventSynchronize (A), or asks the event
from Python until it has fired (B): whether the driver's wait lets the host go cold.
--compare inputs: the input preparation of another version (A: engine/input_batch.py and
engine/block_tables.py from --baseline DIR, laid out as the checkout), or the checkout's (B); the
engine's model runner holds one of each and steps with either.
    python scripts/h200_in_process_ab.py pinning results/h200/host_drift/pinning.json
    python scripts/h200_in_process_ab.py wait results/h200/host_drift/wait.json
    python scripts/h200_in_process_ab.py inputs OUT.json --baseline .ab/A"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path
from types import ModuleType

import torch
from cpu_overhead import NUM_SEQS, drain, host_reference_us, steady_decode_engine
from llmbench.engine.in_flight import InFlightStep
from llmbench.engine.llm_engine import LLMEngine

from llmbench.env import command_line
from llmbench.step_stats import cpu_ms

ROUNDS, STEPS_PER_BLOCK = 16, 60


ALL_CORES = sorted(os.sched_getaffinity(0))


def every_core(engine: LLMEngine) -> None:
    """Every core the process was started with."""
    os.sched_setaffinity(0, ALL_CORES)


def one_core(engine: LLMEngine) -> None:
    """The first core the process was started with."""
    os.sched_setaffinity(0, ALL_CORES[:1])


_synchronize = InFlightStep._synchronize


def event_wait(engine: LLMEngine) -> None:
    """Waiting for a forward's tokens in cudaEventSynchronize, as the engine does."""
    InFlightStep._synchronize = _synchronize


def polled_wait(engine: LLMEngine) -> None:
    """Waiting for a forward's tokens by asking its event until it has fired, from Python."""

    def poll(step: InFlightStep, count: int) -> None:
        copied = step._rows[count - 1].copied
        while copied is not None and not copied.query():
            pass

    InFlightStep._synchronize = poll


def load_baseline(folder: Path) -> ModuleType:
    """The baseline's engine/input_batch.py as a module of its own, importing the baseline's
    engine/block_tables.py where it imports the checkout's."""
    checkout_tables = sys.modules["llmbench.engine.block_tables"]
    modules = {}
    for name in ("block_tables", "input_batch"):
        spec = importlib.util.spec_from_file_location(f"baseline_{name}", folder / "engine" / f"{name}.py")
        modules[name] = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        sys.modules["llmbench.engine.block_tables"] = modules["block_tables"]
        try:
            spec.loader.exec_module(modules[name])
        finally:
            sys.modules["llmbench.engine.block_tables"] = checkout_tables
    return modules["input_batch"]


class InputVersions:
    """The model runner's input buffers of either version, swapped in by `baseline` and `checkout`."""

    def __init__(self, baseline: Path):
        self.module = load_baseline(baseline)
        self.buffers: dict = {}

    def use(self, engine: LLMEngine, version: str) -> None:
        runner = engine.executor
        if not self.buffers:
            make = self.module.InputBuffers
            self.buffers = {"checkout": runner.inputs, "baseline": make(runner.block_size, runner.device)}
        runner.inputs = self.buffers[version]
        # each version counts its own table versions: the graphs' copy of the tables is unknown
        runner.graphs._tables_version = None


def comparisons(baseline: Path | None) -> dict:
    versions = InputVersions(baseline) if baseline else None

    def baseline_inputs(engine: LLMEngine) -> None:
        """Input preparation of the baseline version."""
        versions.use(engine, "baseline")

    def checkout_inputs(engine: LLMEngine) -> None:
        """Input preparation of the checkout."""
        versions.use(engine, "checkout")

    return {
        "pinning": (every_core, one_core),
        "wait": (event_wait, polled_wait),
        "inputs": (baseline_inputs, checkout_inputs),
    }


def block(engine: LLMEngine, setting) -> dict:
    setting(engine)
    reference = host_reference_us()
    for _ in range(STEPS_PER_BLOCK):
        engine.step()
    # the first steps after a swap rebuild the version's persistent rows and views
    records = [r for r in drain(engine, gpu=True)[3:] if r.num_decode_seqs == NUM_SEQS]
    return {
        "host_ms": statistics.median(cpu_ms(vars(r)) for r in records),
        "prepare_ms": statistics.median(r.prepare_ms for r in records),
        "host_reference_us": reference,
        "steps": len(records),
    }


def main(comparison: str, out: Path, baseline: Path | None) -> None:
    sides = dict(zip("AB", comparisons(baseline)[comparison], strict=True))
    engine = steady_decode_engine(gpu=True)
    rounds = []
    for r in range(ROUNDS):
        names = "AB" if r % 2 == 0 else "BA"
        rounds.append({name: block(engine, sides[name]) for name in names})
    engine.shutdown()
    summary = {}
    for name in sides:
        for figure in ("host_ms", "prepare_ms", "host_reference_us"):
            values = [r[name][figure] for r in rounds]
            summary[f"{name}_{figure}"] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    host_gain = [r["A"]["host_ms"] - r["B"]["host_ms"] for r in rounds]
    summary["host_ms_a_minus_b"] = {
        "median": statistics.median(host_gain),
        "rounds_b_faster": sum(g > 0 for g in host_gain),
        "rounds": ROUNDS,
    }
    result = {
        "command": f"python scripts/{command_line()}",
        "comparison": comparison,
        "baseline": str(baseline) if baseline else None,
        "sides": {name: setting.__doc__ or setting.__name__ for name, setting in sides.items()},
        "device": torch.cuda.get_device_name(),
        "cores": ALL_CORES,
        "num_seqs": NUM_SEQS,
        "steps_per_block": STEPS_PER_BLOCK,
        "summary": summary,
        "rounds": rounds,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("comparison", choices=sorted(comparisons(None)))
    parser.add_argument("out", type=Path)
    parser.add_argument("--baseline", type=Path, help="inputs: a folder with the other version's files")
    args = parser.parse_args()
    if (args.comparison == "inputs") != (args.baseline is not None):
        parser.error("--baseline goes with the inputs comparison, and only with it")
    if args.baseline and not (args.baseline / "engine" / "input_batch.py").is_file():
        parser.error(f"--baseline {args.baseline}: no engine/input_batch.py there")
    main(args.comparison, args.out, args.baseline)
