"""`llmbench report`: one self-contained report.html, and PNG figures for CI artifacts, for one or several
runs, a study (ablation, sweep) or a directory of collected result files."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from llmbench.report.load import ReportError
from llmbench.report.page import build_page
from llmbench.report.sections import render_html

__all__ = ["ReportError", "default_report_dir", "write_report"]

log = logging.getLogger(__name__)


def default_report_dir(run_dirs: list[Path], root: Path = Path("runs")) -> Path:
    """A single run's report lives in its own directory; a comparison of several gets a new one."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0])
    return root / f"report-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"


def write_report(run_dirs: list[Path], out_dir: Path) -> Path:
    """Draw the figures into out_dir and write out_dir/report.html; returns the HTML's path."""
    if not run_dirs:
        raise ReportError("give at least one run directory")
    page = build_page([Path(p) for p in run_dirs])
    from llmbench.report import plots  # matplotlib: only once every directory has been read

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [p.run for p in page.points if p.run is not None]

    # PNGs for CI artifacts; those with an interactive chart on the page are files only
    plots.latency_cdfs(runs, out_dir)
    plots.over_time(runs, out_dir)
    plots.headline_bars(runs, out_dir)
    for group in page.groups:
        plots.step_breakdown(group, out_dir)
    for run in page.runs:
        plots.ablation_waterfall(run, out_dir)
        plots.sweep_curve(run, out_dir)

    def embed(path: Path | None, caption: str) -> None:
        if path is not None:
            page.figures.append((path, caption))

    # step by step for the runs given; a study's variants have their own run directories
    runs = [p.run for g in page.groups if g.kind == "runs" for p in g.points if p.run is not None]
    against_gpu = " against GPU time" if any(run.has_gpu_timing for run in runs) else ""
    embed(plots.step_timeline(runs, out_dir), f"Host phases per step{against_gpu}, step by step")
    embed(
        plots.gpu_busy(runs, out_dir), "GPU busy (step spans) over time; kernel busy (nsys) is in a profile"
    )
    embed(plots.utilization(runs, out_dir), "MBU and MFU per step")
    from llmbench.report.telemetry_plots import power_over_time, server_over_time

    embed(server_over_time(runs, out_dir), "The target server's /metrics beside the client's view")
    embed(power_over_time(runs, out_dir), "GPU power draw and SM clock over the timed trials (NVML)")

    report = out_dir / "report.html"
    report.write_text(render_html(page), encoding="utf-8")
    log.debug("report written to %s", report)
    return report
