"""The picture this tool exists for: where each engine step's time goes. Per run, variant or rate, one
stacked bar of the host's time per step (its CPU phases, the readback wait, the rest of the step) and,
with GPU timing, one of the GPU's (work, idle), both in ms per step so they read against each other."""

from __future__ import annotations

from typing import Any

from llmbench.report.charts import chart
from llmbench.report.format import number
from llmbench.report.html import esc, note, table
from llmbench.report.page import Page, Point
from llmbench.report.step_parts import GPU, HOST, OTHER, forward_in_prepare, host_phases, segments


def _host(points: list[tuple[Point, dict[str, float]]]) -> list[tuple[str, str, str]]:
    """The phases that took time in some point (IPC only with a process split, say), and the rest of
    the step where it is a visible share (1%): else it is timer rounding."""
    host = host_phases([p.run.summary for p, _ in points if p.run is not None])
    phases = [part for part in host if any(s[part[0]] > 0 for _, s in points)]
    rest = any(s[OTHER[0]] > 0.01 * _host_total(s) for _, s in points)
    return phases + ([OTHER] if rest else [])


def _host_total(parts: dict[str, float]) -> float:
    return sum(parts[key] for key, _, _ in (*HOST, OTHER))


def _datasets(points: list[tuple[Point, dict[str, float]]], gpu: bool) -> list[dict[str, Any]]:
    sets = [
        {"label": label, "data": [round(s[key], 6) for _, s in points], "color": colour, "stack": "host"}
        for key, label, colour in _host(points)
    ]
    if gpu:
        sets += [
            {
                "label": label,
                "data": [round(s.get(key, 0.0), 6) for _, s in points],
                "color": colour,
                "stack": "GPU",
            }
            for key, label, colour in GPU
        ]
    return sets


def _table(points: list[tuple[Point, dict[str, float]]], gpu: bool) -> str:
    columns = _host(points) + (list(GPU) if gpu else [])
    rows = [[esc(p.label)] + [number(s.get(key)) for key, _, _ in columns] for p, s in points]
    return table(["ms per step", *(esc(label) for _, label, _ in columns)], rows)


def render(page: Page) -> str:
    parts = []
    for group in page.groups:
        points = [(p, s) for p in group.points if (s := segments(p.steps)) is not None]
        if not points:
            continue
        gpu = any("gpu_work" in s for _, s in points)
        title = "Where each step's time goes" + (f": {group.title}" if len(page.groups) > 1 else "")
        spec = {
            "type": "bar",
            "horizontal": True,
            "stacked": True,
            "unit": "ms",
            "labels": [p.label for p, _ in points],
            "datasets": _datasets(points, gpu),
            "x": {"title": "ms per engine step"},
            "y": {},
        }
        height = 90 + (44 if gpu else 30) * len(points)
        parts += [f"<h3>{esc(title)}</h3>", chart(spec, height=max(180, height)), _table(points, gpu)]
    if not parts:
        return ""
    explain = (
        "Host bars: the engine loop's phases per step (schedule, prepare = inputs and launch, output, "
        "IPC with the frontend) and the readback wait, where the host blocks for the sampled tokens. "
        "A multi-step engine step (num_scheduler_steps > 1) runs several forwards."
    )
    gpu_explain = " GPU bars: the step's GPU span and the GPU idle time per step (GPU busy, step spans)."
    if any(forward_in_prepare(p.run.summary) for p in page.points if p.run is not None):
        explain += (
            " On the CPU a forward runs as it is launched, so prepare holds the model's forward too and "
            "the readback wait is near zero."
        )
    has_gpu = any(segments(p.steps) and "gpu_work" in segments(p.steps) for p in page.points)
    return "<h2>Step time breakdown</h2>\n" + "\n".join(
        [note(explain + (gpu_explain if has_gpu else "")), *parts]
    )
