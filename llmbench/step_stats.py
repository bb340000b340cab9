"""What the step log says about where the time went: pure functions over steps.csv rows.

- CPU overhead: the host's own work in a step (schedule, prepare = input preparation and launch,
  output, ipc), per step, per forward (multi-step runs several forwards per step) and per running
  sequence. The sample phase is the token readback: on a GPU mostly the host blocked until the
  step's kernels finish, so it is reported apart as the wait, never as overhead.
- GPU busy (step spans), `gpu_busy_step_spans`: the union of the steps' [gpu_start, gpu_end]
  intervals over wall time (first step start to last step end, summed over trials); the rest are idle
  gaps, each charged to the host phase that overlapped it. A span runs from the step's first forward
  (its start event follows the host's input preparation) to its last kernel, so launch gaps inside an
  eager step count as busy; kernel busy (nsys) comes from `llmbench profile --nsys`.
- MBU and MFU: bytes and FLOPs of each step from the model shape and the batch, over the step's GPU
  time and a peak figure (from the run config's `hardware` section, else H200 defaults).

Steps without GPU timing (CPU runs, the null executor) give None for every GPU figure, never 0."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.config import ModelConfig
from engine.loader import model_shape
from engine.models.llama import LlamaShape

STEP_PHASES = ("schedule_ms", "prepare_ms", "sample_ms", "output_ms", "ipc_ms")
WAIT_PHASE = "sample_ms"  # the token readback: the host waits there for the GPU
CPU_PHASES = tuple(phase for phase in STEP_PHASES if phase != WAIT_PHASE)
# phases that run back to back from a step's t_start (ipc of a split core happens after t_end)
IN_STEP_PHASES = ("schedule_ms", "prepare_ms", "sample_ms", "output_ms")
BETWEEN_STEPS = "between_steps"  # the runner, the frontend and IPC: host time outside any step
OTHER = "other"  # inside a step but in no timed phase
DEFAULT_PEAK_BANDWIDTH = 4.2e12  # bytes/s, H200 default (HBM3e, measured-copy scale)
DEFAULT_PEAK_FLOPS = 7.84e14  # FLOP/s, H200 default (dense bf16)
# summary keys and their names in older result files, which readers fall back to
RENAMED_STEP_KEYS = {"gpu_busy_step_spans": "gpu_busy_fraction"}


def step_value(steps: dict[str, Any], key: str) -> Any:
    """A figure of a summary's `steps`, read under its older name when the file predates the rename."""
    value = steps.get(key)
    if value is None and key in RENAMED_STEP_KEYS:
        return steps.get(RENAMED_STEP_KEYS[key])
    return value


@dataclass(frozen=True)
class StepCosts:
    """Turns a step's batch shape into bytes moved and FLOPs done, and those into utilizations."""

    shape: LlamaShape
    dtype_bytes: int
    peak_bandwidth: float  # bytes/s
    peak_flops: float  # FLOP/s
    peaks_source: str  # "config" or "default (H200)"

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> StepCosts | None:
        """From a resolved run config (summary.json's `config`); None when the model's shape cannot
        be read (e.g. a model path that no longer exists)."""
        model = config.get("model") or {}
        try:
            shape = model_shape(ModelConfig(preset=model.get("preset"), path=model.get("path")))
        except ValueError:
            return None
        hardware = config.get("hardware") or {}
        bandwidth_gb_s, tflops = hardware.get("peak_bandwidth_gb_s"), hardware.get("peak_tflops")
        return cls(
            shape=shape,
            # auto means bfloat16 wherever GPU timing exists
            dtype_bytes=4 if model.get("dtype") == "float32" else 2,
            peak_bandwidth=bandwidth_gb_s * 1e9 if bandwidth_gb_s else DEFAULT_PEAK_BANDWIDTH,
            peak_flops=tflops * 1e12 if tflops else DEFAULT_PEAK_FLOPS,
            peaks_source="config" if bandwidth_gb_s or tflops else "default (H200)",
        )

    def step_bytes(self, row: dict[str, Any]) -> float | None:
        """Weights read once per forward plus the KV cache every scheduled sequence reads."""
        kv_tokens = _kv_tokens_read(row)
        if kv_tokens is None:
            return None
        forwards = row["num_steps"]
        weights = self.shape.param_bytes(self.dtype_bytes)
        return forwards * weights + kv_tokens * self.shape.kv_bytes_per_token(self.dtype_bytes)

    def step_flops(self, row: dict[str, Any]) -> float | None:
        """Matmul FLOPs of every new token plus attention of each sequence's newest token over its
        context. Earlier tokens of a prompt chunk attending to each other are left out: prefill
        attention is undercounted, by a few percent at usual chunk lengths."""
        kv_tokens = _kv_tokens_read(row)
        if kv_tokens is None:
            return None
        forwards = row["num_steps"]
        tokens_per_forward = row["num_prefill_tokens"] + row["num_decode_seqs"]
        matmuls = self.shape.forward_flops(tokens_per_forward, 0, num_logits=row["num_decode_seqs"])
        attention = 4 * self.shape.num_layers * self.shape.q_size * kv_tokens
        return forwards * matmuls + attention

    def utilization(self, row: dict[str, Any]) -> tuple[float, float]:
        """(MBU, MFU) of one step; NaN without GPU time or batch context."""
        gpu_s = _gpu_seconds(row)
        if gpu_s is None:  # CPU runs: every step, so skip the byte and FLOP counts
            return math.nan, math.nan
        nbytes, flops = self.step_bytes(row), self.step_flops(row)
        if nbytes is None or flops is None:
            return math.nan, math.nan
        return nbytes / gpu_s / self.peak_bandwidth, flops / gpu_s / self.peak_flops


def _kv_tokens_read(row: dict[str, Any]) -> float | None:
    """KV positions read over the step's forwards: the batch context once per forward, and in a
    multi-step decode each forward reads one more position per sequence than the one before."""
    context = row.get("num_context_tokens")
    if context is None or _missing(context):
        return None
    n = row["num_steps"]
    return n * context + row["num_decode_seqs"] * n * (n - 1) / 2


def _missing(value: Any) -> bool:
    """None, NaN, or an empty steps.csv cell."""
    return not isinstance(value, numbers.Real) or math.isnan(value)


def _gpu_seconds(row: dict[str, Any]) -> float | None:
    gpu_ms = row.get("gpu_ms")
    return None if _missing(gpu_ms) or gpu_ms <= 0 else gpu_ms / 1e3


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
        if not _missing(r.get("gpu_start")) and not _missing(r.get("gpu_end"))
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
    wall_start = min(r["t_start"] for r in rows)
    wall_end = max(r["t_end"] for r in rows)
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
        wall += max(r["t_end"] for r in trial) - min(r["t_start"] for r in trial)
    return busy / wall if timed and wall > 0 else None


# the summary.json "steps" section


def summarize_steps(rows: Sequence[dict[str, Any]], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Headline numbers of a step log. `config` (the resolved run config) supplies the model shape
    and peak figures for MBU/MFU; without it they are None."""
    if not rows:
        return {
            "num_steps": 0,
            "mean_step_ms": None,
            "mean_cpu_ms_per_step": None,
            "mean_wait_ms": None,
            "mean_gpu_ms": None,
        }
    cpu = np.array([cpu_ms(r) for r in rows])
    forwards = sum(r.get("num_steps", 1) for r in rows)
    running = sum(r.get("num_running", 0) for r in rows)
    gpu = [r["gpu_ms"] for r in rows if _gpu_seconds(r) is not None]
    summary: dict[str, Any] = {
        "num_steps": len(rows),
        "num_forwards": forwards,
        "mean_step_ms": float(np.mean([(r["t_end"] - r["t_start"]) * 1e3 for r in rows])),
        "mean_cpu_ms_per_step": float(cpu.mean()),
        "mean_cpu_ms_per_forward": float(cpu.sum() / forwards) if forwards else None,
        "mean_cpu_ms_per_seq": float(cpu.sum() / running) if running else None,
        "mean_wait_ms": float(np.mean([r.get(WAIT_PHASE) or 0.0 for r in rows])),
    }
    for phase in STEP_PHASES:
        summary[f"mean_{phase}"] = float(np.mean([r.get(phase) or 0.0 for r in rows]))
    # tensor parallel: host time in collectives, spent inside the prepare and sample phases
    summary["mean_comm_ms"] = float(np.mean([r.get("comm_ms") or 0.0 for r in rows]))
    summary["mean_gpu_ms"] = float(np.mean(gpu)) if gpu else None
    summary["gpu_busy_step_spans"] = gpu_busy_step_spans(rows)
    summary.update(_idle_summary(rows) if gpu else {"gpu_idle_ms": None})
    summary.update(_utilization_summary(rows, StepCosts.from_run_config(config) if config else None))
    return summary


def _idle_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    gaps = [gap for trial in _by_trial(rows) for gap in idle_gaps(trial)]
    by_phase: dict[str, float] = {}
    for gap in gaps:
        for phase, ms in gap["by_phase"].items():
            by_phase[phase] = by_phase.get(phase, 0.0) + ms
    summary = {
        "gpu_idle_ms": float(sum(gap["ms"] for gap in gaps)),
        "num_gpu_idle_gaps": len(gaps),
        "max_gpu_idle_gap_ms": float(max((gap["ms"] for gap in gaps), default=0.0)),
    }
    for phase, ms in sorted(by_phase.items()):
        summary[f"gpu_idle_during_{phase}_ms"] = ms
    return summary


def _utilization_summary(rows: Sequence[dict[str, Any]], costs: StepCosts | None) -> dict[str, Any]:
    """Time-weighted MBU and MFU: all bytes (FLOPs) over all GPU time of the steps that have both."""
    nbytes = flops = gpu_s = 0.0
    if costs is not None:
        for r in rows:
            seconds, b, f = _gpu_seconds(r), costs.step_bytes(r), costs.step_flops(r)
            if seconds is not None and b is not None and f is not None:
                nbytes, flops, gpu_s = nbytes + b, flops + f, gpu_s + seconds
    if not gpu_s:
        return {"mbu": None, "mfu": None}
    return {
        "mbu": nbytes / gpu_s / costs.peak_bandwidth,
        "mfu": flops / gpu_s / costs.peak_flops,
        "peak_bandwidth_bytes_per_s": costs.peak_bandwidth,
        "peak_flops_per_s": costs.peak_flops,
        "peaks_source": costs.peaks_source,
    }
