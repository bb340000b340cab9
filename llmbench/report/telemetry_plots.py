"""PNG figures of what a run watched beside the client (llmbench/run/telemetry.py): the target server's
own /metrics over time next to what the client saw at the same moments (server_metrics.csv), and the
GPU's power and clock (gpu_samples.csv). Each function returns the file it wrote, or None when no run
has the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from llmbench.report.load import RunData


def _series(runs: list[RunData], name: str) -> list[tuple[int, RunData, pd.DataFrame]]:
    found = []
    for i, run in enumerate(runs):
        path = run.path / name
        if path.is_file():
            frame = pd.read_csv(path)
            if len(frame):
                found.append((i, run, frame))
    return found


def _in_flight(run: RunData, times: np.ndarray) -> np.ndarray:
    """How many timed requests the client had sent and not yet seen end, at each time."""
    spans = [(r.submit_time, r.finish_time or r.submit_time) for r in run.requests]
    return np.array([sum(start <= t < end for start, end in spans) for t in times])


def _per_second(frame: pd.DataFrame, column: str) -> pd.Series:
    """A counter's rate between successive scrapes of one trial (NaN across trials)."""
    same_trial = frame["trial"].diff() == 0
    return (frame[column].diff() / frame["time_s"].diff()).where(same_trial)


def server_over_time(runs: list[RunData], out_dir: Path) -> Path | None:
    """Requests the server ran and queued against those the client had in flight, the server's KV cache
    usage, and generated tokens/s as each side counted them."""
    found = _series(runs, "server_metrics.csv")
    if not found:
        return None
    fig = Figure(figsize=(11, 9), layout="constrained")
    queue_ax, kv_ax, tokens_ax = fig.subplots(3, 1, sharex=True)
    for i, run, frame in found:
        color, label = f"C{i % 10}", (run.label or run.name).replace("$", r"\$")
        t = frame["time_s"]
        queue_ax.plot(
            t, _in_flight(run, t.to_numpy()), color=color, linestyle="--", label=f"{label} client in flight"
        )
        for column, style in (("running", "-"), ("waiting", ":")):
            if column in frame:
                queue_ax.plot(
                    t, frame[column], color=color, linestyle=style, label=f"{label} server {column}"
                )
        if "kv_cache_usage" in frame:
            kv_ax.plot(t, frame["kv_cache_usage"] * 100, color=color, label=label)
        if "generation_tokens" in frame:
            tokens_ax.plot(t, _per_second(frame, "generation_tokens"), color=color, label=f"{label} server")
        if run.token_times.size:
            edges = np.linspace(t.min(), max(t.max(), t.min() + 1e-3), max(2, len(t)))
            counts, _ = np.histogram(run.token_times, bins=edges)
            tokens_ax.step(
                edges[1:], counts / np.diff(edges), color=color, linestyle="--", label=f"{label} client"
            )
    queue_ax.set(title="Requests: the server's view (its /metrics) and the client's", ylabel="requests")
    kv_ax.set(title="Server KV cache usage", ylabel="%")
    tokens_ax.set(title="Generated tokens/s", ylabel="tokens/s", xlabel="time since run start (s)")
    for ax in (queue_ax, kv_ax, tokens_ax):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    path = out_dir / "server_metrics.png"
    fig.savefig(path, dpi=96)
    return path


def power_over_time(runs: list[RunData], out_dir: Path) -> Path | None:
    """The GPU's power draw and SM clock over the timed trials, from gpu_samples.csv."""
    found = _series(runs, "gpu_samples.csv")
    if not found:
        return None
    fig = Figure(figsize=(11, 6), layout="constrained")
    power_ax, clock_ax = fig.subplots(2, 1, sharex=True)
    for i, run, frame in found:
        color, label = f"C{i % 10}", (run.label or run.name).replace("$", r"\$")
        power_ax.plot(frame["time_s"], frame["power_w"], color=color, label=label)
        clock_ax.plot(frame["time_s"], frame["sm_clock_mhz"], color=color, label=label)
    power_ax.set(title="GPU power draw", ylabel="W")
    clock_ax.set(title="GPU SM clock", ylabel="MHz", xlabel="time since run start (s)")
    for ax in (power_ax, clock_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    path = out_dir / "gpu_power.png"
    fig.savefig(path, dpi=96)
    return path
