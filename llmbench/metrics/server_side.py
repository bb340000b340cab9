"""The server's own figures over a run, from its /metrics scraped at intervals (llmbench/run/scrape.py):
each counter's increase and each histogram's mean over the timed trials, and the gauges' mean and peak;
and each trial's prefix-cache hit rate (vLLM's hits over queries in the trial, else SGLang's gauge's mean
over the trial's scrapes), the figure that tells a trial served from a warm cache.

A trial's increase runs from its first scrape to its last, and the trials' increases add up, so what
the server did between trials (warm-up, a pause) is left out. A counter that went down within a trial
was reset (the server restarted): its increase is unknown, and None."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmbench.metrics.prometheus import COUNTERS, GAUGES, HISTOGRAMS

Row = tuple[float, int, dict[str, float]]  # (seconds since the run started, trial, quantities)


def summarize_scrapes(rows: Sequence[Row]) -> dict[str, Any]:
    trials: dict[int, list[dict[str, float]]] = {}
    for _, trial, values in rows:
        trials.setdefault(trial, []).append(values)
    summary: dict[str, Any] = {"scrapes": len(rows)}
    for quantity in COUNTERS:
        summary[quantity] = _increase(trials.values(), quantity)
    for quantity in HISTOGRAMS:
        total = _increase(trials.values(), f"{quantity}_sum")
        count = _increase(trials.values(), f"{quantity}_count")
        mean = total / count * 1000 if total is not None and count else None
        summary[f"server_mean_{quantity}_ms"] = mean
    for quantity in GAUGES:
        seen = [values[quantity] for _, _, values in rows if quantity in values]
        summary[f"mean_{quantity}"] = sum(seen) / len(seen) if seen else None
        summary[f"max_{quantity}"] = max(seen) if seen else None
    summary["prefix_cache_hit_rate_by_trial"] = [_hit_rate(scrapes) for scrapes in trials.values()]
    return summary


def _hit_rate(scrapes: list[dict[str, float]]) -> float | None:
    hits, queries = _increase([scrapes], "prefix_cache_hits"), _increase([scrapes], "prefix_cache_queries")
    if hits is not None and queries:
        return hits / queries
    seen = [s["prefix_cache_hit_rate"] for s in scrapes if "prefix_cache_hit_rate" in s]
    return sum(seen) / len(seen) if seen else None


def _increase(trials: Sequence[list[dict[str, float]]], key: str) -> float | None:
    """A counter's increase summed over the trials; None when no trial saw it, or it was reset."""
    total, seen = 0.0, False
    for scrapes in trials:
        values = [s[key] for s in scrapes if key in s]
        if len(values) < 2:
            continue
        if any(b < a for a, b in zip(values, values[1:], strict=False)):
            return None
        total += values[-1] - values[0]
        seen = True
    return total if seen else None
