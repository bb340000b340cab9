"""PNG figures of one or several runs. Figures are built on matplotlib's object API (no pyplot), so
nothing depends on a display or on global backend state. Each function returns the file it wrote, or
None when the runs lack the data (CPU runs have no GPU timing, single runs have nothing to compare)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from llmbench.metrics.steps import STEP_PHASES, WAIT_PHASE
from llmbench.report.load import RunData
from llmbench.report.page import Group
from llmbench.report.step_parts import GPU, OTHER, host_phases, segments
from llmbench.results.ablation import Variant
from llmbench.studies.ablation_table import fixed_text

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
HEADLINE_BARS = (
    ("output_throughput", "output tokens/s"),
    ("request_throughput", "requests/s"),
    ("mean_ttft_ms", "mean TTFT (ms)"),
    ("mean_tpot_ms", "mean TPOT (ms)"),
    ("mean_itl_ms", "mean ITL (ms)"),
    ("p99_e2el_ms", "p99 E2EL (ms)"),
)
MAX_TIMELINE_POINTS = 2000  # longer step logs are averaged into this many buckets


def _plain(text: str) -> str:
    """User text shown literally: a `$` would otherwise start matplotlib math mode."""
    return text.replace("$", r"\$")


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=96)
    return path


def _time_bins(start: float, end: float, target: int = 60) -> np.ndarray:
    return np.linspace(start, max(end, start + 1e-3), target + 1)


def latency_cdfs(runs: list[RunData], out_dir: Path) -> Path | None:
    if not any(run.samples[key].size for run in runs for key, _ in LATENCIES):
        return None
    fig = Figure(figsize=(11, 7), layout="constrained")
    for ax, (key, label) in zip(fig.subplots(2, 2).flat, LATENCIES, strict=True):
        for run in runs:
            values = np.sort(run.samples[key])
            if values.size:
                ax.step(
                    values, np.arange(1, values.size + 1) / values.size, where="post", label=_plain(run.label)
                )
        ax.set(title=f"{label} CDF", xlabel="ms", ylabel="fraction of samples", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize="small")
    return _save(fig, out_dir / "latency_cdf.png")


def over_time(runs: list[RunData], out_dir: Path) -> Path | None:
    """Output throughput, running / waiting requests and KV blocks in use against run time."""
    if not any(run.token_times.size or run.steps is not None for run in runs):
        return None
    fig = Figure(figsize=(11, 9), layout="constrained")
    throughput_ax, queue_ax, kv_ax = fig.subplots(3, 1, sharex=True)
    for i, run in enumerate(runs):
        color, label = f"C{i % 10}", _plain(run.label)
        if run.token_times.size:
            edges = _time_bins(run.token_times.min(), run.token_times.max())
            counts, _ = np.histogram(run.token_times, bins=edges)
            throughput_ax.plot(edges[:-1], counts / np.diff(edges), color=color, label=label)
        if run.steps is not None:
            t = run.steps["t_end"]
            queue_ax.plot(t, run.steps["num_running"], color=color, label=f"{label} running")
            queue_ax.plot(t, run.steps["num_waiting"], color=color, linestyle=":", label=f"{label} waiting")
            kv_ax.plot(t, run.steps["num_blocks_used"], color=color, label=label)
    throughput_ax.set(title="Output throughput", ylabel="tokens/s")
    queue_ax.set(title="Requests running and waiting", ylabel="requests")
    kv_ax.set(title="KV cache blocks in use", ylabel="blocks", xlabel="time since run start (s)")
    for ax in (throughput_ax, queue_ax, kv_ax):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    return _save(fig, out_dir / "over_time.png")


def _bucketed(steps: pd.DataFrame) -> pd.DataFrame:
    bucket = max(1, -(-len(steps) // MAX_TIMELINE_POINTS))
    return steps.groupby(np.arange(len(steps)) // bucket).mean(numeric_only=True)


def step_timeline(runs: list[RunData], out_dir: Path) -> Path | None:
    """Per step: host time in each CPU phase stacked, against GPU time where it was measured."""
    with_steps = [run for run in runs if run.steps is not None and len(run.steps)]
    if not with_steps:
        return None
    fig = Figure(figsize=(11, 3.2 * len(with_steps) + 0.5), layout="constrained")
    for ax, run in zip(np.atleast_1d(fig.subplots(len(with_steps), 1)), with_steps, strict=True):
        steps = _bucketed(run.steps)
        phases = [p for p in STEP_PHASES if p in steps]
        labels = [p[:-3] + (" (readback wait)" if p == WAIT_PHASE else "") for p in phases]
        ax.stackplot(steps["step"], [steps[p] for p in phases], labels=labels, alpha=0.8)
        title = f"{_plain(run.label)}: host phases per step"
        if run.has_gpu_timing:
            ax.plot(steps["step"], steps["gpu_ms"], color="black", linewidth=1, label="GPU")
        else:
            title += " (no GPU timing)"
        ax.set(title=title, xlabel="step", ylabel="ms")
        ax.legend(fontsize="small", loc="upper right", ncols=3)
        ax.grid(alpha=0.3)
    return _save(fig, out_dir / "step_timeline.png")


def gpu_busy(runs: list[RunData], out_dir: Path) -> Path | None:
    """Share of wall time inside steps' GPU spans (first event to last kernel), per time bin."""
    with_gpu = [run for run in runs if run.has_gpu_timing]
    if not with_gpu:
        return None
    fig = Figure(figsize=(11, 3.5), layout="constrained")
    ax = fig.subplots()
    for run in with_gpu:
        steps = run.steps.dropna(subset=["gpu_ms"])
        edges = _time_bins(steps["t_start"].min(), steps["t_end"].max())
        gpu_s, _ = np.histogram(steps["t_start"], bins=edges, weights=steps["gpu_ms"] / 1e3)
        ax.plot(edges[:-1], np.minimum(100 * gpu_s / np.diff(edges), 100), label=f"{_plain(run.label)}")
    ax.set(
        title="GPU busy (step spans)",
        ylabel="% of wall time",
        xlabel="time since run start (s)",
        ylim=(0, 105),
    )
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, out_dir / "gpu_busy.png")


def utilization(runs: list[RunData], out_dir: Path) -> Path | None:
    """MBU and MFU per step, when the step log carries them."""
    columns = ("mbu", "mfu")
    with_util = [r for r in runs if r.steps is not None and any(_has_values(r.steps, c) for c in columns)]
    if not with_util:
        return None
    fig = Figure(figsize=(11, 3.5), layout="constrained")
    ax = fig.subplots()
    for run in with_util:
        steps = _bucketed(run.steps)
        for column in columns:
            if _has_values(steps, column):
                ax.plot(steps["step"], 100 * steps[column], label=f"{_plain(run.label)} {column.upper()}")
    ax.set(title="Model bandwidth and FLOPs utilization", xlabel="step", ylabel="% of peak", ylim=(0, 105))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, out_dir / "utilization.png")


def _has_values(steps: pd.DataFrame, column: str) -> bool:
    return column in steps and bool(steps[column].notna().any())


def _waterfall_bottoms(variants: list[Variant], values: list[float]) -> list[float]:
    """A variant that switches on everything its predecessor had plus more stands on the
    predecessor's bar; any other (the baseline, all-on, leave-one-out) stands on zero."""
    base = variants[0].toggles
    enabled = [{k for k, v in var.toggles.items() if v != base.get(k)} for var in variants]
    bottoms = [0.0]
    for i in range(1, len(variants)):
        bottoms.append(values[i - 1] if enabled[i] > enabled[i - 1] else 0.0)
    return bottoms


def ablation_waterfall(run: RunData, out_dir: Path) -> Path | None:
    """Output throughput as toggles are switched on one by one, each gain stacked on the last."""
    if not run.ablation or not run.ablation.variants:
        return None
    variants = run.ablation.variants
    names = [_plain(v.name) for v in variants]
    values = [float(v.metrics.output_throughput if v.metrics else 0.0) for v in variants]
    bottoms = _waterfall_bottoms(variants, values)
    heights = [v - b for v, b in zip(values, bottoms, strict=True)]
    colors = [
        "tab:gray" if b == 0 else "tab:green" if h >= 0 else "tab:red"
        for b, h in zip(bottoms, heights, strict=True)
    ]
    fig = Figure(figsize=(max(6, 1.3 * len(names)), 4.5), layout="constrained")
    ax = fig.subplots()
    bars = ax.bar(range(len(names)), heights, bottom=bottoms, color=colors)
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize="small")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    preset = f"preset {run.ablation.preset}{fixed_text(run.ablation)}"
    ax.set(
        title=f"{_plain(run.label)}: output throughput by optimization, {preset}", ylabel="output tokens/s"
    )
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, out_dir / f"ablation_{run.slug}.png")


def sweep_curve(run: RunData, out_dir: Path) -> Path | None:
    """TTFT and TPOT (median and p99) against the output throughput each offered rate reached."""
    measured = [(p.label, p.metrics) for p in (run.sweep.points if run.sweep else []) if p.metrics]
    points = [(label, metrics) for label, metrics in measured if metrics.output_throughput]
    if not points:
        return None
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    throughput = [metrics.output_throughput for _, metrics in points]
    for ax, name in zip(fig.subplots(1, 2), ("ttft", "tpot"), strict=True):
        for stat, style in (("median", "o-"), ("p99", "s--")):
            values = [metrics.value(f"{stat}_{name}_ms") for _, metrics in points]
            if any(v is not None for v in values):
                ax.plot(throughput, [float("nan") if v is None else v for v in values], style, label=stat)
        for x, (label, metrics) in zip(throughput, points, strict=True):
            median = metrics.value(f"median_{name}_ms")
            if median is not None:  # each point named by its offered rate
                ax.annotate(f"{label} req/s", (x, median), xytext=(4, 6), textcoords="offset points")
        ax.set(xlabel="output tokens/s", ylabel=f"{name.upper()} ms", title=f"{name.upper()} by offered rate")
        ax.margins(x=0.12)  # room for the last point's label
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{_plain(run.label)}: latency as the load rises")
    return _save(fig, out_dir / f"sweep_{run.slug}.png")


def headline_bars(runs: list[RunData], out_dir: Path) -> Path | None:
    """Side-by-side bars of the headline metrics, one bar per run."""
    if len(runs) < 2:
        return None
    fig = Figure(figsize=(12, 6.5), layout="constrained")
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for ax, (key, label) in zip(fig.subplots(2, 3).flat, HEADLINE_BARS, strict=True):
        values = [(run.metrics.value(key) if run.metrics else None) or 0.0 for run in runs]
        bars = ax.bar(range(len(runs)), values, color=colors)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize="small")
        ax.set_xticks(
            range(len(runs)), [_plain(run.label) for run in runs], rotation=20, ha="right", fontsize="small"
        )
        ax.set_title(label)
        ax.grid(alpha=0.3, axis="y")
    return _save(fig, out_dir / "runs_side_by_side.png")


def step_breakdown(group: Group, out_dir: Path) -> Path | None:
    """Where each step's time goes, one stacked host bar (and GPU bar, when timed) per point."""
    points = [(p.label, s) for p in group.points if (s := segments(p.steps)) is not None]
    if not points:
        return None
    gpu = any("gpu_work" in s for _, s in points)
    fig = Figure(figsize=(11, 1.2 + 0.55 * len(points) * (2 if gpu else 1)), layout="constrained")
    ax = fig.subplots()
    host = host_phases([p.run.summary for p in group.points if p.run is not None])
    rows = [(f"{label} host", s, (*host, OTHER)) for label, s in points]
    if gpu:
        gpu_rows = [(f"{label} GPU", s, GPU) for label, s in points]
        rows = [r for pair in zip(rows, gpu_rows, strict=True) for r in pair]
    for y, (_, parts, keys) in enumerate(rows):
        left = 0.0
        for key, name, colour in keys:
            ax.barh(y, parts.get(key, 0.0), left=left, color=colour, label=name)
            left += parts.get(key, 0.0)
    ax.set_yticks(range(len(rows)), [_plain(r[0]) for r in rows])
    ax.invert_yaxis()
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize="small", ncols=4, loc="lower right")
    ax.set(title=f"{_plain(group.title)}: where each step's time goes", xlabel="ms per engine step")
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, out_dir / f"step_breakdown_{re.sub(r'[^a-z0-9_.-]+', '_', group.title.lower())}.png")
