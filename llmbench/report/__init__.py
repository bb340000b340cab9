"""`llmbench report`: PNG figures and one self-contained report.html for one or several runs."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from llmbench.report import plots
from llmbench.report.html import render_html
from llmbench.report.load import ReportError, load_runs

__all__ = ["ReportError", "default_report_dir", "write_report"]

log = logging.getLogger(__name__)


def default_report_dir(run_dirs: list[Path], root: Path = Path("results")) -> Path:
    """A single run's report lives in its own directory; a comparison of several gets a new one."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0])
    return root / f"report-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"


def write_report(run_dirs: list[Path], out_dir: Path) -> Path:
    """Draw the figures into out_dir and write out_dir/report.html; returns the HTML's path."""
    if not run_dirs:
        raise ReportError("give at least one run directory")
    runs = load_runs([Path(p) for p in run_dirs])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    figures, notes = [], []

    def add(path: Path | None, caption: str, missing: str | None = None) -> None:
        if path is not None:
            figures.append((path, caption))
        elif missing:
            notes.append(missing)

    add(plots.headline_bars(runs, out_dir), "Headline metrics, run by run")
    add(plots.latency_cdfs(runs, out_dir), "Latency CDFs", "No completed requests: no latency CDFs.")
    add(plots.over_time(runs, out_dir), "Throughput, queue and KV cache over time")
    add(plots.step_timeline(runs, out_dir), "Per-step host phases vs GPU time", "No step log (steps.csv).")
    no_gpu = "No GPU timing in these runs (CPU run or step timing off): GPU busy is not shown."
    busy = "GPU busy (step spans) over time; kernel-level busy is in a profile's kernel_busy_fraction"
    add(plots.gpu_busy(runs, out_dir), busy, no_gpu)
    add(plots.utilization(runs, out_dir), "MBU and MFU per step", "No MBU/MFU columns in the step log.")
    for run in runs:
        add(plots.ablation_waterfall(run, out_dir), f"Ablation waterfall: {run.label}")
        add(plots.sweep_curve(run, out_dir), f"Rate sweep: {run.label}")

    report = out_dir / "report.html"
    report.write_text(render_html(runs, figures, notes), encoding="utf-8")
    log.debug("report written to %s", report)
    return report
