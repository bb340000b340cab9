"""The run over time, interactive: output throughput, requests running and waiting, and KV cache
blocks in use, one line per run (or variant, or rate) that has request rows or a step log."""

from __future__ import annotations

import numpy as np

from llmbench.report.charts import color, line_chart, xy
from llmbench.report.html import note
from llmbench.report.page import Page

MAX_WAITING_LINES = 3  # with more runs, waiting lines beside running ones are a tangle
BINS = 60  # throughput is a rate: tokens counted in this many slices of the run


def render(page: Page) -> str:
    points = [
        p for p in page.points if p.run is not None and (p.run.token_times.size or p.run.steps is not None)
    ]
    if not points:
        return ""
    throughput, queue, blocks = [], [], []
    for i, point in enumerate(points):
        run, c = point.run, color(i)
        if run.token_times.size:
            edges = np.linspace(
                run.token_times.min(), max(run.token_times.max(), run.token_times.min() + 1e-3), BINS + 1
            )
            counts, _ = np.histogram(run.token_times, bins=edges)
            throughput.append(
                {"label": point.label, "data": xy(edges[:-1], counts / np.diff(edges)), "color": c}
            )
        if run.steps is not None:
            t = run.steps["t_end"].to_numpy(dtype=float)
            running = run.steps["num_running"].to_numpy(dtype=float)
            waiting = run.steps["num_waiting"].to_numpy(dtype=float)
            queue.append({"label": f"{point.label} running", "data": xy(t, running), "color": c})
            if len(points) <= MAX_WAITING_LINES:
                dashed = {"color": c, "borderDash": [4, 3]}
                queue.append({"label": f"{point.label} waiting", "data": xy(t, waiting), **dashed})
            blocks.append(
                {
                    "label": point.label,
                    "data": xy(t, run.steps["num_blocks_used"].to_numpy(dtype=float)),
                    "color": c,
                }
            )
    x = {"title": "time since run start (s)", "unit": "s"}
    parts = ["<h2>Over time</h2>"]
    if throughput:
        parts.append(line_chart("Output throughput", x, {"title": "tokens/s", "min": 0}, throughput, "tok/s"))
    if queue:
        parts.append('<div class="charts2">')
        title = "Requests running and waiting" if len(points) <= MAX_WAITING_LINES else "Requests running"
        parts.append(line_chart(title, x, {"title": "requests", "min": 0}, queue))
        parts.append(line_chart("KV cache blocks in use", x, {"title": "blocks", "min": 0}, blocks, "blocks"))
        parts.append("</div>")
    if len(points) > 6:
        parts.append(note("Click a name in a legend to hide or show its line."))
    return "\n".join(parts)
