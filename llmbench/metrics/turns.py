"""Metrics per turn index of multi-turn sessions (summary.json's `turns`): turn 1's TTFT against the
later turns' shows what the prefix cache saves on a history, and the mean prompt length how long the
histories had grown. The timed requests of every trial are pooled."""

from __future__ import annotations

from collections.abc import Sequence

from llmbench.config.schema import SloConfig
from llmbench.metrics.requests import compute_metrics
from llmbench.results.metrics import Latencies, TurnMetrics
from llmbench.results.records import RequestRecord

LATENCY_SUFFIXES = ("_ttft_ms", "_tpot_ms", "_e2el_ms")


def per_turn_metrics(
    records: Sequence[RequestRecord], percentiles: Sequence[float], slo: SloConfig | None = None
) -> dict[str, TurnMetrics]:
    """{"1": ..., "2": ...}: each turn's count, mean prompt length and TTFT, TPOT and E2EL statistics."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.turn is not None and not record.warmup:
            by_turn.setdefault(record.turn, []).append(record)
    turns = {}
    for turn, group in sorted(by_turn.items()):
        metrics = compute_metrics(group, percentiles, slo)
        turns[str(turn)] = TurnMetrics(
            completed=metrics.completed,
            failed=metrics.failed,
            mean_prompt_len=sum(r.prompt_len for r in group) / len(group),
            latencies=_turn_latencies(metrics.latencies),
        )
    return turns


def _turn_latencies(latencies: Latencies) -> Latencies:
    """TTFT, TPOT and E2EL only: a turn's ITL is the run's, and stays None here."""
    kept = {
        key: getattr(latencies, key) for key in Latencies.__struct_fields__ if key.endswith(LATENCY_SUFFIXES)
    }
    percentiles = {key: v for key, v in latencies.percentiles.items() if key.endswith(LATENCY_SUFFIXES)}
    return Latencies(**kept, percentiles=percentiles)
