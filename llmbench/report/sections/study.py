"""An ablation's or a sweep's own picture, built from its variants or rates: output throughput per
variant with what each switched on and its gain over all off; latency against the throughput each
offered rate reached."""

from __future__ import annotations

from llmbench.report.charts import chart, color, line_chart
from llmbench.report.format import number
from llmbench.report.html import esc, table
from llmbench.report.page import Group, Page, Point
from llmbench.report.sections.headline import spread, value
from llmbench.results.json_file import known


def _switched(group: Group) -> list[str]:
    """What each variant changed against the one before (the first against nothing)."""
    changes, previous = [], None
    for point in group.points:
        if previous is None:
            changes.append("baseline")
        else:
            diff = [k if v is True else f"{k}={v}" for k, v in point.toggles.items() if previous.get(k) != v]
            changes.append(", ".join(diff) or "same toggles")
        previous = point.toggles
    return changes


def _ablation(group: Group) -> str:
    points = group.points
    throughput = [value(p, "output_throughput") for p in points]
    base = throughput[0] if throughput and throughput[0] else None
    spec = {
        "type": "bar",
        "unit": "tok/s",
        "labels": [p.label for p in points],
        "datasets": [{"label": "output throughput", "data": [t or 0 for t in throughput], "color": color(0)}],
        "x": {},
        "y": {"title": "output tokens/s", "min": 0},
    }
    gpu = any(value(p, "gpu_busy_step_spans") is not None for p in points)
    rows = []
    for point, change, tput in zip(points, _switched(group), throughput, strict=True):
        gain = f"{tput / base:.2f}×" if base and tput is not None else "n/a"
        steps = point.steps
        rows.append(
            [
                esc(point.label),
                esc(change),
                number(tput)
                + (f"<br><small>{esc(spread(point, 'output_throughput'))}</small>" if point.trials else ""),
                gain,
                number(steps.mean_cpu_ms_per_step),
                number(known(steps.mean_cpu_ms_per_forward)),
            ]
            + ([number(value(point, "gpu_busy_step_spans"), "%")] if gpu else [])
        )
    header = [
        "variant",
        "switched",
        "output tok/s",
        "vs first",
        "CPU ms/step",
        "CPU ms/forward",
    ] + (["GPU busy (step spans)"] if gpu else [])
    return chart(spec, height=300) + table(header, rows, text_columns=(0, 1))


def _sweep_line(points: list[Point], name: str, unit_label: str) -> str:
    datasets = []
    for i, stat in enumerate(("p50", "p99")):
        data = [
            {"x": value(p, "output_throughput"), "y": value(p, f"{stat}_{name}_ms"), "note": p.label}
            for p in points
            if value(p, "output_throughput") is not None and value(p, f"{stat}_{name}_ms") is not None
        ]
        datasets.append({"label": f"{unit_label} {stat}", "data": data, "color": color(i)})
    spec_x = {"title": "output tokens/s reached", "unit": "tok/s"}
    y = {"title": f"{unit_label} (ms)"}
    return line_chart(f"{unit_label} as the load rises", spec_x, y, datasets, "ms", markers=True)


def render(page: Page) -> str:
    parts = []
    for group in page.groups:
        if group.kind == "ablation" and group.points:
            parts += [f"<h3>{esc(group.title)}: output throughput by variant</h3>", _ablation(group)]
        elif group.kind == "sweep" and group.points:
            parts += [
                f"<h3>{esc(group.title)}: latency against throughput</h3>",
                '<div class="charts2">'
                + _sweep_line(group.points, "ttft", "TTFT")
                + _sweep_line(group.points, "tpot", "TPOT")
                + "</div>",
            ]
    return "<h2>Ablation and sweep</h2>\n" + "\n".join(parts) if parts else ""
