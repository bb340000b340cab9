"""Latency at every configured percentile (whatever p-keys the summaries carry, p99.9 included) and
interactive distributions (CDFs) of TTFT, TPOT, ITL and E2EL for the points with request rows; a
reasoning model's run adds TTFO and the ITL of each phase to the tables, and with them its token split."""

from __future__ import annotations

import re

import numpy as np

from llmbench.report.charts import line_chart, xy
from llmbench.report.format import LATENCY, describe, header_cell, number
from llmbench.report.html import esc, table
from llmbench.report.page import Page, Point

_PERCENTILE = re.compile(rf"^p([0-9.]+)_({'|'.join(LATENCY)})_ms$")
REASONING_COUNTS = ("total_reasoning_tokens", "total_answer_tokens", "requests_without_answer")


def percentiles(points: list[Point]) -> list[str]:
    """Every percentile any point's metrics hold, in order, as the key infix (`50`, `99.9`)."""
    keys = [k for p in points if p.metrics for k in p.metrics.latencies.percentiles]
    found = {m.group(1) for k in keys if (m := _PERCENTILE.match(k))}
    return sorted(found, key=float)


def _columns(points: list[Point]) -> list[tuple[str, str]]:
    """(metrics key prefix, heading): mean, every percentile, max."""
    return [("mean", "mean"), *((f"p{q}", f"p{q}") for q in percentiles(points)), ("max", "max")]


def _ms(point: Point, key: str) -> float | None:
    return point.metrics.value(key) if point.metrics else None


def _latencies(points: list[Point]) -> dict[str, tuple[str, str]]:
    """The latencies these points have: the reasoning ones only where a run streamed reasoning."""
    return {
        name: text
        for name, text in LATENCY.items()
        if any(_ms(p, f"mean_{name}_ms") is not None for p in points)
    }


def _single(point: Point) -> str:
    columns = _columns([point])
    rows = [
        [f'<span title="{esc(definition)}">{esc(label)} (ms)</span>']
        + [number(_ms(point, f"{prefix}_{name}_ms")) for prefix, _ in columns]
        for name, (label, definition) in _latencies([point]).items()
    ]
    return table(["", *(esc(h) for _, h in columns)], rows)


def _per_metric(points: list[Point]) -> str:
    columns = _columns(points)
    parts = []
    for name, (label, definition) in _latencies(points).items():
        rows = [
            [esc(p.label)] + [number(_ms(p, f"{prefix}_{name}_ms")) for prefix, _ in columns] for p in points
        ]
        parts.append(
            f'<h4 title="{esc(definition)}">{esc(label)} (ms)</h4>'
            + table(["", *(esc(h) for _, h in columns)], rows)
        )
    return '<div class="charts2">' + "".join(parts) + "</div>"


def _cdfs(points: list[Point]) -> str:
    with_samples = [p for p in points if p.run is not None and any(s.size for s in p.run.samples.values())]
    if not with_samples:
        return ""
    charts = []
    for name, (label, _) in LATENCY.items():
        datasets = []
        for point in with_samples:
            values = np.sort(point.run.samples.get(name, np.empty(0)))
            if values.size:
                share = 100 * np.arange(1, values.size + 1) / values.size
                datasets.append({"label": point.label, "data": xy(values, share)})
        if datasets:
            x = {"title": f"{label} (ms)", "unit": "ms"}
            y = {"title": "% of samples at or below", "min": 0, "max": 100}
            charts.append(line_chart(f"{label} distribution (CDF)", x, y, datasets, "%"))
    return '<div class="charts2">' + "".join(charts) + "</div>"


def _reasoning_counts(points: list[Point]) -> str:
    """How the output split into reasoning and answer, for runs that streamed reasoning."""
    shown = [p for p in points if _ms(p, "total_reasoning_tokens") is not None]
    if not shown:
        return ""
    rows = [[esc(p.label)] + [number(_ms(p, k), describe(k).unit) for k in REASONING_COUNTS] for p in shown]
    return table(["", *(header_cell(k) for k in REASONING_COUNTS)], rows)


def render(page: Page) -> str:
    parts = []
    for group in page.groups:
        points = [p for p in group.points if p.metrics is not None]
        if not points:
            continue
        if len(page.groups) > 1:
            parts.append(f"<h3>{esc(group.title)}</h3>")
        parts.append(_single(points[0]) if len(points) == 1 else _per_metric(points))
        parts.append(_reasoning_counts(points))
        parts.append(_cdfs(points))
    if not parts:
        return ""
    return "<h2>Latency</h2>\n" + "\n".join(parts)
