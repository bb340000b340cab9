"""Metrics per served model of a mix (backend.models; summary.json's `models`): each model's requests
measured as a run of their own, beside the overall figures. A model's throughput divides its own
requests by its own span (first submit to last end), so the models' figures add up to about the whole;
with --repeat, each figure is the median over the trials, as `metrics` is."""

from __future__ import annotations

from collections.abc import Sequence

from llmbench.config.schema import SloConfig
from llmbench.metrics.requests import compute_metrics, median_metrics
from llmbench.results.metrics import Metrics
from llmbench.results.records import RequestRecord


def per_model_metrics(
    records: Sequence[RequestRecord],
    models: Sequence[str],
    percentiles: Sequence[float],
    slo: SloConfig | None = None,
) -> dict[str, Metrics]:
    """{model: metrics} in the order `models` names them (a model no request went to: all counts 0)."""
    timed = [r for r in records if not r.warmup]
    trials = sorted({r.trial for r in timed}) or [0]
    return {
        model: median_metrics(
            [
                compute_metrics([r for r in timed if r.trial == k and r.model == model], percentiles, slo)
                for k in trials
            ]
        )
        for model in models
    }
