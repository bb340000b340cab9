"""The CI gate's deterministic mode: instructions per engine step of a config, counted under Valgrind's
callgrind for the baseline tree and the current tree (scripts/perf_gate.sh).

A count, unlike a time, does not move with what else the machine is doing: the same code on the same
inputs executes the same instructions whether the other core is idle or busy. So one run a side is a
verdict, and a 3% regression is as visible on a loaded CI runner as on a quiet one.

What is counted, and why so:
- Only the engine steps of the timed trial. Python and torch's start (about 7.4 G instructions) and the
  warm-up phase (lazy imports, first-call caches) would otherwise dwarf the ~0.5 G of the steps, and
  their own small variation would hide a step's regression. callgrind starts with instrumentation off
  (`--instr-atstart=no`, so the start runs several times faster than instrumented) and collection off
  (`--collect-atstart=no`); a tiny C library built here issues the client requests that switch
  instrumentation on as the timed trial begins and toggle collection on and off around each
  `LLMEngine.step()`. Subtracting two runs of different lengths was the other way: it counts the steps
  as a small difference of two large totals, so the totals' variation (0.035% of 7.6 G, a few M) is a
  percent of the difference.
- The client's own work inside a step (`while_waiting`, which flushes the step log when it is due, a
  time-dependent branch) is toggled out, so no decision that reads the clock falls inside the count.
- Only the main thread (`--separate-threads=yes`, file `-01`): the engine runs in-process there for
  configs/ci.yaml; the progress display's refresh thread wakes on a timer and is not counted.
- Each timed trial ends with a dump of its count (`CALLGRIND_DUMP_STATS`) and instrumentation switched
  off again, so the summary's pandas work after it runs uninstrumented; switching off zeroes what was
  collected, hence the dump, and the count is the sum of the dumps.
- `PYTHONHASHSEED=0`, so set and dict iteration orders of strings are the same in every run.

The harness is injected from outside the trees (it wraps `run_phase` and `LLMEngine.step` by name), so an
older baseline commit is counted exactly as the current tree is, with no hook of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from llmbench.results.summary import RunSummary

# the client requests the harness issues; outside Valgrind each is a few no-op instructions
MARKS_SOURCE = """#include <valgrind/callgrind.h>
void llmbench_start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }
void llmbench_dump_and_stop(void) { CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION; }
void llmbench_toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
"""

# run by `python3 -c` in a tree's root, so the tree's own llmbench is the one imported:
#   argv: config, marks library, run directory, counts file
HARNESS = """
import ctypes, gc, json, sys
# an editable install of another checkout must not fill in a module this tree lacks
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
config, marks_path, out, counts_file = sys.argv[1:5]
marks = ctypes.CDLL(marks_path)
toggle = marks.llmbench_toggle_collect
import llmbench.run.runner as runner
try:
    from llmbench.engine.core.llm_engine import LLMEngine
except ModuleNotFoundError:  # a tree from before the engine's folders (CHANGELOG.md)
    from llmbench.engine.llm_engine import LLMEngine
state = {"timed": False, "instrumented": False, "steps": 0}
run_phase, step = runner.run_phase, LLMEngine.step

def counted_phase(run_state, requests, trial, warmup, label):
    state["timed"] = not warmup
    if state["timed"] and not state["instrumented"]:
        gc.collect()  # the collector's counters from zero: its passes fall on the same steps every run
        marks.llmbench_start_instrumentation()
        state["instrumented"] = True
    try:
        return run_phase(run_state, requests, trial, warmup, label)
    finally:
        if state["timed"]:
            # a dump of the trial's count, then the summary's pandas work runs uninstrumented (several
            # times faster); stopping instrumentation zeroes what was collected, hence the dump first
            marks.llmbench_dump_and_stop()
            state["instrumented"] = False
        state["timed"] = False

def counted_step(self, while_waiting=None):
    if not state["timed"]:
        return step(self, while_waiting)
    def client_work():
        toggle()
        while_waiting()
        toggle()
    toggle()
    try:
        return step(self, None if while_waiting is None else client_work)
    finally:
        toggle()
        state["steps"] += 1

runner.run_phase, LLMEngine.step = counted_phase, counted_step
from llmbench.cli import app
try:
    code = app(["run", config, "--out", out, "--no-report"], standalone_mode=False)
except SystemExit as e:
    code = e.code
with open(counts_file, "w") as f:
    json.dump({"steps": state["steps"], "exit_code": code or 0}, f)
"""

VALGRIND_ARGS = (
    "--tool=callgrind",
    "--instr-atstart=no",
    "--collect-atstart=no",
    "--separate-threads=yes",
    "--dump-instr=no",
    "--dump-line=no",
)


class CountError(RuntimeError):
    """A side could not be counted (no Valgrind, no compiler, a run that failed): the gate's exit 2."""


@dataclass(frozen=True)
class StepInstructions:
    """What one side's counted run measured."""

    instructions: int  # in the timed trial's engine steps, main thread
    steps: int
    completed: int  # requests the run completed

    @property
    def per_step(self) -> float:
        return self.instructions / self.steps


def build_marks(work: Path) -> Path:
    """Compile the client-request library (gcc and Valgrind's headers, both on the CI image)."""
    if shutil.which("valgrind") is None:
        raise CountError(
            "valgrind is not installed: install it (apt-get install valgrind) or use --mode wall"
        )
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise CountError(
            "no C compiler (cc or gcc) to build the Valgrind client requests; or use --mode wall"
        )
    work.mkdir(parents=True, exist_ok=True)
    source, library = work / "marks.c", work / "marks.so"
    source.write_text(MARKS_SOURCE)
    done = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True, text=True
    )
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["?"])[0]
        raise CountError(f"building the Valgrind client requests failed (valgrind/callgrind.h?): {first}")
    return library


def start_count(tree: Path, config: str, marks: Path, work: Path, label: str) -> subprocess.Popen:
    """One counted `llmbench run CONFIG` with the tree's own code, started in the background."""
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONHASHSEED="0")
    command = [
        "valgrind",
        *VALGRIND_ARGS,
        f"--callgrind-out-file={work / f'{label}.callgrind.%p'}",
        f"--log-file={work / f'{label}.valgrind.log'}",
        sys.executable,
        "-c",
        HARNESS,
        config,
        str(marks),
        str(work / f"{label}-run"),
        str(work / f"{label}.counts.json"),
    ]
    log = open(work / f"{label}.log", "w")
    try:
        return subprocess.Popen(command, cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    finally:
        log.close()  # the child holds its own descriptor


def read_count(
    tree: Path, config: str, work: Path, label: str, process: subprocess.Popen
) -> StepInstructions:
    """Wait for a counted run and read what it measured: the main thread's collected instructions."""
    code = process.wait()
    counts_file = work / f"{label}.counts.json"
    where = f"see {work / f'{label}.log'}"
    if code != 0 or not counts_file.is_file():
        raise CountError(f"{tree}: the counted `llmbench run {config}` exited {code}; {where}")
    counts = json.loads(counts_file.read_text())
    if counts["exit_code"] != 0 or counts["steps"] == 0:
        raise CountError(
            f"{tree}: `llmbench run {config}` exited {counts['exit_code']} and counted no step; {where}"
        )
    # one dump per timed trial (the harness dumps before it stops instrumenting), main thread only
    dumps = sorted(work.glob(f"{label}.callgrind.{process.pid}.*-01"))
    if not dumps:
        raise CountError(f"{tree}: callgrind wrote no count for the main thread; {where}")
    metrics = RunSummary.load(work / f"{label}-run").metrics
    return StepInstructions(
        instructions=sum(callgrind_total(dump) for dump in dumps),
        steps=counts["steps"],
        completed=metrics.completed if metrics is not None else 0,
    )


def callgrind_total(path: Path) -> int:
    """The collected instruction count of one callgrind output file (its `summary:` line)."""
    for line in path.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise CountError(f"{path}: no summary line (callgrind cut short?)")


def count_sides(trees: dict[str, Path], config: str, work: Path) -> dict[str, StepInstructions]:
    """Each tree's instructions per step, the sides counted at the same time (one core each on a 2-core
    runner: counts do not care that they share the machine)."""
    marks = build_marks(work / "marks")
    started = {side: start_count(tree, config, marks, work, side) for side, tree in trees.items()}
    try:
        return {side: read_count(trees[side], config, work, side, started[side]) for side in trees}
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()
