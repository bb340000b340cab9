"""Headline figures first: throughput, goodput against the stated SLOs, TTFT/TPOT/ITL p50 and p99 and
GPU busy, each with its unit and definition. One run gets cards; several runs, variants or rates get
one row each. Repeated trials add their spread (min–max) under each figure."""

from __future__ import annotations

from typing import Any

from llmbench.report.format import describe, header_cell, number, with_unit
from llmbench.report.html import esc, table
from llmbench.report.page import Page, Point
from llmbench.report.sections.header import slo_text, sources
from llmbench.results.json_file import known
from llmbench.results.metrics import Metrics

HEADLINE = (
    "output_throughput",
    "request_throughput",
    "request_goodput",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "gpu_busy_step_spans",
)
CARD_EXTRA = ("completed", "failed", "duration_s")


def value(point: Point, key: str, metrics: Metrics | None = None) -> Any:
    """A headline figure of the point (or of one of its trials' `metrics`) by its key in the file."""
    metrics = point.metrics if metrics is None else metrics
    if key == "gpu_busy_step_spans":
        return known(point.steps.gpu_busy_step_spans)
    if metrics is None:
        return None
    if key.startswith("p50_") and metrics.value(key) is None:
        return metrics.value("median_" + key[4:])  # summaries before p50 was listed
    return metrics.value(key)


def spread(point: Point, key: str) -> str:
    """`min–max over K trials`, or "" without repeated trials."""
    values = [v for v in (value(point, key, t) for t in point.trials) if isinstance(v, int | float)]
    if len(values) < 2 or key == "gpu_busy_step_spans":
        return ""
    unit = describe(key).unit
    return f"{number(min(values), unit)}–{number(max(values), unit)} over {len(values)} trials"


def _keys(points: list[Point]) -> list[str]:
    """The headline figures these points have: GPU busy needs GPU timing, goodput needs SLOs."""
    return [k for k in HEADLINE if any(value(p, k) is not None for p in points)]


def _definition(key: str, slos: str) -> str:
    text = describe(key).definition
    return f"{text} (SLOs: {slos})" if key == "request_goodput" else text


def _card(point: Point, key: str, slos: str) -> str:
    metric = describe(key)
    raw = value(point, key)
    shown = "no SLOs" if key == "request_goodput" and raw is None else number(raw, metric.unit)
    unit = "" if metric.unit in ("", "%") or raw is None else metric.unit
    interval = spread(point, key)
    definition = _definition(key, slos)
    return (
        f'<div class="card"><div class="label" title="{esc(definition)}">{esc(metric.label)}</div>'
        f'<div class="value">{shown} <span class="unit">{esc(unit)}</span></div>'
        + (f'<div class="def">{esc(interval)}</div>' if interval else "")
        + f'<div class="def">{esc(definition)}</div></div>'
    )


def _cards(point: Point, slos: str) -> str:
    cards = [_card(point, key, slos) for key in _keys([point])]
    counts = ", ".join(
        f"{describe(k).label.lower()} {with_unit(value(point, k), describe(k).unit)}"
        for k in CARD_EXTRA
        if value(point, k) is not None
    )
    return f'<div class="cards">{"".join(cards)}</div><p>{esc(counts)}.</p>' if counts else ""


def _cell(point: Point, key: str) -> str:
    text = number(value(point, key), describe(key).unit)
    interval = spread(point, key)
    return text + (f"<br><small>{esc(interval.split(' over')[0])}</small>" if interval else "")


def group_table(points: list[Point], keys: list[str], first: str) -> str:
    """One row per point, one column per figure (units in the headings, definitions on hover)."""
    rows = [[esc(p.label)] + [_cell(p, k) for k in keys] for p in points]
    return table([esc(first), *(header_cell(k) for k in keys)], rows)


def render(page: Page) -> str:
    if not page.points:
        return ""
    configs = [s.config for _, s in sources(page)]
    slos = slo_text(configs[0]) if configs else "not recorded"
    parts = ["<h2>Headline figures</h2>"]
    for group in page.groups:
        if len(page.groups) > 1 or group.kind != "runs":
            parts.append(f"<h3>{esc(group.title)}</h3>")
        if len(group.points) == 1:
            parts.append(_cards(group.points[0], slos))
        else:
            first = {"ablation": "variant", "sweep": "offered rate"}.get(group.kind, "run")
            parts.append(group_table(group.points, ["completed", *_keys(group.points)], first))
    if any(p.trials for p in page.points):
        parts.append(
            '<p class="note">Figures are medians over trials; the small figures are the '
            "lowest and highest trial.</p>"
        )
    return "\n".join(parts)
