"""Interactive charts in a self-contained page: each chart is a canvas plus its spec as inline JSON,
drawn by the vendored Chart.js (vendor/chart.umd.min.js, MIT, see vendor/NOTICE) and charts.js.
Chart.js was picked because it is widely used and maintained, draws the bars, stacked bars and lines
the report needs with hover tooltips, and is one 205 KB file with no dependencies, so the report stays
one offline file."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent
MAX_POINTS = 400  # per line: enough for a smooth curve, small enough to keep the page light
# Okabe-Ito: distinguishable with the common colour-vision deficiencies
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
_ids = itertools.count()


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def chart(spec: dict[str, Any], height: int = 320) -> str:
    """A canvas and its spec. The JSON is made safe inside <script>: no `<` survives to close the tag."""
    canvas = f"chart-{next(_ids)}"
    data = json.dumps(_finite(spec), allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
    return (
        f'<div class="chart" style="height:{height}px"><canvas id="{canvas}"></canvas></div>'
        f'<script type="application/json" class="chart-spec" data-canvas="{canvas}">{data}</script>'
    )


def _finite(value: Any) -> Any:
    """NaN and infinities (a summary written by Python's json can hold them) as null: a gap, not an error."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def scripts() -> str:
    """Chart.js and the drawing code, inline; added once to a page that has charts."""
    library = (HERE / "vendor" / "chart.umd.min.js").read_text(encoding="utf-8")
    own = (HERE / "charts.js").read_text(encoding="utf-8")
    return f"<script>{library}</script><script>{own}</script>"


def xy(x: np.ndarray, y: np.ndarray) -> list[dict[str, float]]:
    """Points of a line, thinned to at most MAX_POINTS evenly spaced ones, NaNs left out."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size > MAX_POINTS:
        index = np.linspace(0, x.size - 1, MAX_POINTS).round().astype(int)
        x, y = x[index], y[index]
    return [{"x": float(a), "y": float(b)} for a, b in zip(x, y, strict=True)]


def line_chart(
    title: str,
    x: dict[str, Any],
    y: dict[str, Any],
    datasets: list[dict[str, Any]],
    unit: str = "",
    markers: bool = False,
) -> str:
    """A line chart over a numeric x axis; `datasets` hold {"label", "data": xy(...)}; `markers` draws
    each point (a few measured points rather than a dense curve)."""
    for i, d in enumerate(datasets):
        d.setdefault("color", color(i))
    spec = {
        "type": "line",
        "title": title,
        "x": {"type": "linear", **x},
        "y": y,
        "unit": unit,
        "points": markers,
    }
    return chart({**spec, "datasets": datasets, "labels": []})
