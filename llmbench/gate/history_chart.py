"""`llmbench history FILE`: a metric's trend over the gate's records as a PNG and a self-contained HTML
page (the chart inlined, the records and change points as tables), each change point marked where the
series stepped."""

from __future__ import annotations

import base64
import html
import statistics
from pathlib import Path

from matplotlib.figure import Figure

from llmbench.gate.history import ChangePoint, HistoryError, HistoryRecord, change_points

DEFAULT_MIN_CHANGE = 0.01


def metric_series(records: list[HistoryRecord], metric: str | None) -> tuple[str, list[HistoryRecord]]:
    """The records of one metric, in file order; the only metric in the file when none is named."""
    metrics = sorted({r.metric for r in records})
    if metric is None:
        if len(metrics) > 1:
            raise HistoryError(f"the history holds {', '.join(metrics)}: choose one with --metric")
        metric = metrics[0]
    series = [r for r in records if r.metric == metric]
    if not series:
        raise HistoryError(f"--metric {metric}: not in the history (it holds {', '.join(metrics)})")
    return metric, series


def render_history(
    records: list[HistoryRecord],
    out_dir: Path,
    metric: str | None = None,
    min_change: float = DEFAULT_MIN_CHANGE,
) -> tuple[Path, Path, list[HistoryRecord], list[ChangePoint]]:
    """history.html and history.png in out_dir; the metric's records and their change points."""
    metric, series = metric_series(records, metric)
    points = change_points([r.value for r in series], min_change)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = _chart(series, metric, points, min_change, out_dir / "history.png")
    page = out_dir / "history.html"
    page.write_text(_page(series, metric, points, png, min_change))
    return page, png, series, points


def _chart(
    series: list[HistoryRecord], metric: str, points: list[ChangePoint], min_change: float, path: Path
) -> Path:
    fig = Figure(figsize=(10, 4.5))
    ax = fig.add_subplot()
    xs = list(range(len(series)))
    values = [r.value for r in series]
    ax.plot(xs, values, marker="o", color="#1f77b4", label=metric)
    lows = [r.value / (1 + r.change) * (1 + r.ci_low) if r.ci_low is not None else None for r in series]
    highs = [r.value / (1 + r.change) * (1 + r.ci_high) if r.ci_high is not None else None for r in series]
    spans = [
        (x, lo, hi) for x, lo, hi in zip(xs, lows, highs, strict=True) if lo is not None and hi is not None
    ]
    if spans:
        ax.vlines(
            [s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans], color="#1f77b4", alpha=0.4
        )
    failing = [(x, r.value) for x, r in zip(xs, series, strict=True) if r.exit_code == 1]
    if failing:
        ax.scatter(
            [x for x, _ in failing], [y for _, y in failing], color="#d62728", zorder=3, label="regression"
        )
    for point in points:
        ax.axvline(point.index - 0.5, color="#ff7f0e", linestyle="--")
        ax.annotate(
            f"{point.change:+.1%}",
            (point.index - 0.5, point.after),
            color="#ff7f0e",
            textcoords="offset points",
            xytext=(4, 6),
        )
    # at least twice min_change each side of the median: a flat series of counts must not read as a cliff
    center = statistics.median(values)
    margin = 2 * min_change * abs(center)
    ax.set_ylim(min(min(values), center - margin), max(max(values), center + margin))
    ax.set_xticks(xs, [r.commit[:8] for r in series], rotation=60, fontsize=7)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by commit ({len(series)} gates, {len(points)} change points)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=96)
    return path


def _page(
    series: list[HistoryRecord], metric: str, points: list[ChangePoint], png: Path, min_change: float
) -> str:
    image = base64.b64encode(png.read_bytes()).decode()
    esc = html.escape
    change_rows = (
        "".join(
            f"<tr><td>{esc(series[p.index].commit[:12])}</td><td>{esc(series[p.index].date)}</td>"
            f"<td>{p.before:,.6g}</td><td>{p.after:,.6g}</td><td>{p.change:+.2%}</td></tr>"
            for p in points
        )
        or '<tr><td colspan="5">none</td></tr>'
    )
    rows = "".join(
        f"<tr><td>{esc(r.commit[:12])}</td><td>{esc(r.date)}</td><td>{r.value:,.6g}</td>"
        f"<td>{r.change:+.2%}</td><td>{esc(r.verdict)}</td><td>{r.exit_code}</td><td>{esc(r.mode)}</td></tr>"
        for r in series
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>llmbench history: {esc(metric)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head><body>
<h1>{esc(metric)} by commit</h1>
<img src="data:image/png;base64,{image}" alt="{esc(metric)} by commit">
<h2>Change points</h2>
<p>Where the series steps by more than {min_change:.1%} and four times its noise, and stays.</p>
<table><tr><th>first commit</th><th>date</th><th>before</th><th>after</th><th>change</th></tr>
{change_rows}</table>
<h2>Gates</h2>
<table><tr><th>commit</th><th>date</th><th>value</th><th>vs baseline</th><th>verdict</th><th>exit</th>
<th>mode</th></tr>
{rows}</table></body></html>
"""
