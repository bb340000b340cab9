"""Metrics per turn index of multi-turn sessions (summary.json's `turns`): turn 1's TTFT against the
later turns' shows what the prefix cache saves on a history, and the mean prompt length how long the
histories had grown. The timed requests of every trial are pooled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmbench.config.schema import SloConfig
from llmbench.metrics.requests import compute_metrics
from llmbench.results.records import RequestRecord

LATENCY_SUFFIXES = ("_ttft_ms", "_tpot_ms", "_e2el_ms")


def per_turn_metrics(
    records: Sequence[RequestRecord], percentiles: Sequence[float], slo: SloConfig | None = None
) -> dict[str, dict[str, Any]]:
    """{"1": {...}, "2": {...}}: each turn's count, mean prompt length and latency statistics."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.turn is not None and not record.warmup:
            by_turn.setdefault(record.turn, []).append(record)
    turns = {}
    for turn, group in sorted(by_turn.items()):
        metrics = compute_metrics(group, percentiles, slo)
        latencies = {key: value for key, value in metrics.items() if key.endswith(LATENCY_SUFFIXES)}
        turns[str(turn)] = {
            "completed": metrics["completed"],
            "failed": metrics["failed"],
            "mean_prompt_len": sum(r.prompt_len for r in group) / len(group),
            **latencies,
        }
    return turns
