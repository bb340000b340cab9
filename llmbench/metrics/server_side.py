"""The server's own figures over a run, from its /metrics scraped at intervals (llmbench/run/scrape.py):
each counter's increase and each histogram's mean over the timed trials, and the gauges' mean and peak;
and each trial's prefix-cache hit rate (vLLM's hits over queries in the trial, else SGLang's gauge's mean
over the trial's scrapes), the figure that tells a trial served from a warm cache; and, where the server
decodes speculatively, each trial's acceptance (spec_decode_summary).

A trial's increase runs from its first scrape to its last, and the trials' increases add up, so what
the server did between trials (warm-up, a pause) is left out. A counter that went down within a trial
was reset (the server restarted): its increase is unknown, and None."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmbench.metrics.prometheus import COUNTERS, GAUGES, HISTOGRAMS, SPEC_COUNTERS, SPEC_GAUGES
from llmbench.results.summary import ServerMetrics

Row = tuple[float, int, dict[str, float]]  # (seconds since the run started, trial, quantities)


def summarize_scrapes(url: str, rows: Sequence[Row], sources: dict[str, str]) -> ServerMetrics:
    """The block of a server scraped at `url` (at least once); `sources`: the Prometheus name each
    quantity was read from."""
    trials: dict[int, list[dict[str, float]]] = {}
    for _, trial, values in rows:
        trials.setdefault(trial, []).append(values)
    # the quantities' names are Prometheus's lists' (metrics/prometheus.py), each a field of ServerMetrics
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
    summary.update(spec_decode_summary(list(trials.values())))
    return ServerMetrics(url=url, available=True, **summary, sources=sources)


def _hit_rate(scrapes: list[dict[str, float]]) -> float | None:
    hits, queries = _increase([scrapes], "prefix_cache_hits"), _increase([scrapes], "prefix_cache_queries")
    if hits is not None and queries:
        return hits / queries
    return _mean(scrapes, "prefix_cache_hit_rate")


def spec_decode_summary(trials: Sequence[list[dict[str, float]]]) -> dict[str, Any]:
    """Speculative decoding over the timed trials and in each: the drafts (a request's proposal at one
    step; SGLang's verify passes), the proposed and the accepted tokens, the acceptance rate (accepted /
    proposed) and the mean accepted length (vLLM's: 1 + accepted / drafts, the token the target model
    adds itself included). Without vLLM's counts of tokens, SGLang's: the length is the tokens each
    verify pass produced (generated tokens less each finished request's first, which its prefill made,
    over the verify passes), else its gauge's mean over the scrapes, as the rate is. Empty where the
    server reported none of it."""
    if not any(
        key in scrape for scrapes in trials for scrape in scrapes for key in (*SPEC_COUNTERS, *SPEC_GAUGES)
    ):
        return {}
    return {
        "spec_drafts": _increase(trials, "spec_drafts"),
        "spec_draft_tokens": _increase(trials, "spec_draft_tokens"),
        "spec_accepted_tokens": _increase(trials, "spec_accepted_tokens"),
        "spec_acceptance_rate": _acceptance_rate(trials),
        "spec_mean_accepted_length": _accepted_length(trials),
        "spec_drafts_by_trial": [_increase([scrapes], "spec_drafts") for scrapes in trials],
        "spec_acceptance_rate_by_trial": [_acceptance_rate([scrapes]) for scrapes in trials],
        "spec_mean_accepted_length_by_trial": [_accepted_length([scrapes]) for scrapes in trials],
    }


def _acceptance_rate(trials: Sequence[list[dict[str, float]]]) -> float | None:
    accepted, proposed = _increase(trials, "spec_accepted_tokens"), _increase(trials, "spec_draft_tokens")
    if accepted is not None and proposed:
        return accepted / proposed
    return _mean([scrape for scrapes in trials for scrape in scrapes], "spec_accept_rate")


def _accepted_length(trials: Sequence[list[dict[str, float]]]) -> float | None:
    drafts, accepted = _increase(trials, "spec_drafts"), _increase(trials, "spec_accepted_tokens")
    if drafts and accepted is not None:
        return 1 + accepted / drafts
    generated, finished = _increase(trials, "generation_tokens"), _increase(trials, "requests_finished")
    if drafts and generated is not None and finished is not None:
        return (generated - finished) / drafts
    return _mean([scrape for scrapes in trials for scrape in scrapes], "spec_accept_length")


def _mean(scrapes: list[dict[str, float]], key: str) -> float | None:
    """A gauge's mean over the scrapes that have it."""
    seen = [s[key] for s in scrapes if key in s]
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
