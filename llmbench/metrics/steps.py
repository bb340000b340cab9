"""What the step log says about where the time went: pure functions over steps.csv rows.

- CPU overhead: the host's own work in a step (schedule, prepare = input preparation and launch,
  output, ipc), per step, per forward (multi-step runs several forwards per step) and per running
  sequence. The sample phase is the token readback: on a GPU mostly the host blocked until the
  step's kernels finish, so it is reported apart as the wait, never as overhead.
- GPU busy (step spans), `gpu_busy_step_spans`: the union of the steps' [gpu_start, gpu_end]
  intervals over wall time (first step start to last step end, or to the last kernel when the device
  finishes after the host, summed over trials, so never above 1); the rest are idle
  gaps, each charged to the host phase that overlapped it. A span runs from the step's first forward
  (its start event follows the host's input preparation) to its last kernel, so launch gaps inside an
  eager step count as busy; kernel busy (nsys) comes from `llmbench profile --nsys`.
- MBU and MFU: bytes and FLOPs of each step (llmbench/metrics/step_costs.py) over the step's GPU time and a
  peak figure (from the run config's `hardware` section, else H200 defaults).

Steps without GPU timing (CPU runs, the null executor) give None for every GPU figure, never 0."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET

from llmbench.device.clocks import merge_readings
from llmbench.metrics.requests import median_over_trials
from llmbench.metrics.step_costs import StepCosts, gpu_seconds, is_missing, with_utilization
from llmbench.results.json_file import known
from llmbench.results.steps import GpuClock, Steps

STEP_PHASES = ("schedule_ms", "prepare_ms", "sample_ms", "output_ms", "ipc_ms")
WAIT_PHASE = "sample_ms"  # the token readback: the host waits there for the GPU
CPU_PHASES = tuple(phase for phase in STEP_PHASES if phase != WAIT_PHASE)
# phases that run back to back from a step's t_start (ipc of a split core happens after t_end)
IN_STEP_PHASES = ("schedule_ms", "prepare_ms", "sample_ms", "output_ms")
BETWEEN_STEPS = "between_steps"  # the runner, the frontend and IPC: host time outside any step
OTHER = "other"  # inside a step but in no timed phase
# summary keys and their names in older result files, which readers fall back to
RENAMED_STEP_KEYS = {"gpu_busy_step_spans": "gpu_busy_fraction"}


def step_value(steps: dict[str, Any], key: str) -> Any:
    """A figure of a summary's `steps`, read under its older name when the file predates the rename."""
    value = steps.get(key)
    if value is None and key in RENAMED_STEP_KEYS:
        return steps.get(RENAMED_STEP_KEYS[key])
    return value


def cpu_ms(row: dict[str, Any]) -> float:
    """The host's own work in one step: every timed phase but the readback wait."""
    return sum(row.get(phase) or 0.0 for phase in CPU_PHASES)


def derived_columns(row: dict[str, Any], costs: StepCosts | None) -> dict[str, float]:
    """The per-step columns steps.csv carries beside the engine's own."""
    mbu, mfu = costs.utilization(row) if costs is not None else (math.nan, math.nan)
    return {"cpu_ms": cpu_ms(row), "mbu": mbu, "mfu": mfu}


# GPU intervals and idle gaps


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, non-overlapping union of [start, end] intervals."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _gpu_intervals(rows: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    return [
        (r["gpu_start"], r["gpu_end"])
        for r in rows
        if not is_missing(r.get("gpu_start")) and not is_missing(r.get("gpu_end"))
    ]


def _host_intervals(rows: Sequence[dict[str, Any]]) -> list[tuple[float, float, str]]:
    """The host timeline rebuilt from phase durations: each step's phases back to back from its
    t_start, the rest of the step as `other`, and the time between steps as `between_steps`."""
    timeline = []
    previous_end = None
    for r in sorted(rows, key=lambda r: r["t_start"]):
        if previous_end is not None and r["t_start"] > previous_end:
            timeline.append((previous_end, r["t_start"], BETWEEN_STEPS))
        t = r["t_start"]
        for phase in IN_STEP_PHASES:
            length = (r.get(phase) or 0.0) / 1e3
            if length > 0:
                end = min(t + length, r["t_end"])
                timeline.append((t, end, phase[:-3]))
                t = end
        if r["t_end"] > t:
            timeline.append((t, r["t_end"], OTHER))
        previous_end = r["t_end"] if previous_end is None else max(previous_end, r["t_end"])
    return timeline


def idle_gaps(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stretches of one trial's wall time with no step on the GPU, each with the host time per
    phase that overlapped it and the phase with the most (`phase`). Empty without GPU timing."""
    busy = merge_intervals(_gpu_intervals(rows))
    if not busy:
        return []
    wall_start, wall_end = _wall(rows, busy)
    edges = [wall_start] + [x for interval in busy for x in interval] + [wall_end]
    gaps = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True) if b > a]
    host = _host_intervals(rows)
    result = []
    i = 0
    for start, end in gaps:
        # both lists are sorted by time: skip host intervals that ended before this gap
        while i < len(host) and host[i][1] <= start:
            i += 1
        overlap: dict[str, float] = {}
        j = i
        while j < len(host) and host[j][0] < end:
            a, b, phase = host[j]
            overlap[phase] = overlap.get(phase, 0.0) + (min(b, end) - max(a, start)) * 1e3
            j += 1
        phase = max(overlap, key=overlap.get) if overlap else BETWEEN_STEPS
        result.append(
            {"start": start, "end": end, "ms": (end - start) * 1e3, "phase": phase, "by_phase": overlap}
        )
    return result


def _wall(rows: Sequence[dict[str, Any]], busy: list[tuple[float, float]]) -> tuple[float, float]:
    """A trial's wall time: from its first step's start to its last step's end, or to the device's
    last kernel where that comes later (overlapped steps return before their work finishes)."""
    start = min(r["t_start"] for r in rows)
    end = max(r["t_end"] for r in rows)
    if busy:
        start, end = min(start, busy[0][0]), max(end, busy[-1][1])
    return start, end


def _by_trial(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    trials: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        trials.setdefault(r.get("trial", 0), []).append(r)
    return list(trials.values())


def gpu_busy_step_spans(rows: Sequence[dict[str, Any]]) -> float | None:
    """GPU busy (step spans): union of the steps' GPU intervals over wall time, each trial's span
    counted on its own."""
    busy = wall = 0.0
    timed = False
    for trial in _by_trial(rows):
        intervals = merge_intervals(_gpu_intervals(trial))
        timed = timed or bool(intervals)
        busy += sum(b - a for a, b in intervals)
        start, end = _wall(trial, intervals)
        wall += end - start
    return busy / wall if timed and wall > 0 else None


# the summary.json "steps" section


def summarize_steps(rows: Sequence[dict[str, Any]], config: dict[str, Any] | None = None) -> Steps:
    """Headline numbers of a step log. `config` (the resolved run config) supplies the model shape
    and peak figures for MBU/MFU; without it they are None."""
    if not rows:
        return Steps(num_steps=0)
    cpu = np.array([cpu_ms(r) for r in rows])
    forwards = sum(r.get("num_steps", 1) for r in rows)
    running = sum(r.get("num_running", 0) for r in rows)
    gpu = [r["gpu_ms"] for r in rows if gpu_seconds(r) is not None]

    def mean_of(phase: str) -> float:
        return float(np.mean([r.get(phase) or 0.0 for r in rows]))

    steps = Steps(
        num_steps=len(rows),
        num_forwards=forwards,
        mean_step_ms=float(np.mean([(r["t_end"] - r["t_start"]) * 1e3 for r in rows])),
        mean_cpu_ms_per_step=float(cpu.mean()),
        mean_cpu_ms_per_forward=float(cpu.sum() / forwards) if forwards else None,
        mean_cpu_ms_per_seq=float(cpu.sum() / running) if running else None,
        mean_wait_ms=mean_of(WAIT_PHASE),
        mean_schedule_ms=mean_of("schedule_ms"),
        mean_prepare_ms=mean_of("prepare_ms"),
        mean_sample_ms=mean_of("sample_ms"),
        mean_output_ms=mean_of("output_ms"),
        mean_ipc_ms=mean_of("ipc_ms"),
        # tensor parallel: host time in collectives, spent inside the prepare and sample phases
        mean_comm_ms=mean_of("comm_ms"),
        mean_gpu_ms=float(np.mean(gpu)) if gpu else None,
        gpu_busy_step_spans=gpu_busy_step_spans(rows),
        gpu_idle_ms=None,
    )
    if gpu:
        steps = _with_idle_gaps(steps, rows)
    return with_utilization(steps, rows, StepCosts.from_run_config(config) if config else None)


def _with_idle_gaps(steps: Steps, rows: Sequence[dict[str, Any]]) -> Steps:
    """`steps` with the GPU's idle gaps over the trials, and the idle time charged to each host phase
    that overlapped it (a phase that overlapped none is left out)."""
    gaps = [gap for trial in _by_trial(rows) for gap in idle_gaps(trial)]
    by_phase: dict[str, float] = {}
    for gap in gaps:
        for phase, ms in gap["by_phase"].items():
            by_phase[phase] = by_phase.get(phase, 0.0) + ms
    return msgspec.structs.replace(
        steps,
        gpu_idle_ms=float(sum(gap["ms"] for gap in gaps)),
        num_gpu_idle_gaps=len(gaps),
        max_gpu_idle_gap_ms=float(max((gap["ms"] for gap in gaps), default=0.0)),
        gpu_idle_during_between_steps_ms=by_phase.get(BETWEEN_STEPS, UNSET),
        gpu_idle_during_other_ms=by_phase.get(OTHER, UNSET),
        gpu_idle_during_output_ms=by_phase.get("output", UNSET),
        gpu_idle_during_prepare_ms=by_phase.get("prepare", UNSET),
        gpu_idle_during_sample_ms=by_phase.get("sample", UNSET),
        gpu_idle_during_schedule_ms=by_phase.get("schedule", UNSET),
    )


def median_steps(trials: Sequence[Steps]) -> Steps:
    """Each figure's median over repeated trials (median_over_trials), the GPU clocks pooled: the
    median over readings, which are not numbers, would keep the first trial's."""
    steps = msgspec.convert(median_over_trials([msgspec.to_builtins(t) for t in trials]), Steps)
    clock = merge_readings([msgspec.to_builtins(known(t.gpu_clock)) for t in trials])
    return msgspec.structs.replace(steps, gpu_clock=msgspec.convert(clock, GpuClock)) if clock else steps
