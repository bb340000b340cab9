"""summary.json: what a run measured, with its config and machine, and why it counts as failed. The
sections come typed from metrics/ and device/; here they become a RunSummary (llmbench/results), to
which the runner adds the parts a run may lack."""

from __future__ import annotations

from typing import Any

import msgspec

from llmbench.device.machine import Environment
from llmbench.metrics.requests import median_metrics
from llmbench.results.metrics import Metrics
from llmbench.results.steps import Steps
from llmbench.results.summary import SCHEMA_VERSION, RunSummary

MAX_TRIALS = 1000  # --repeat: each trial's metrics stay in summary.json


def nothing_completed(trial_metrics: list[Metrics]) -> str | None:
    """Why a finished run counts as failed: no timed request of any trial completed."""
    if any(m.completed for m in trial_metrics):
        return None
    failed = sum(m.failed for m in trial_metrics)
    return f"no request completed ({failed} failed; see the error column of requests.jsonl)"


def build_summary(
    name: str,
    complete: bool,
    started_at: str,
    config: dict[str, Any],
    environment: Environment,
    trials: list[Metrics],
    steps: Steps,
) -> RunSummary:
    """summary.json's content; with several trials, `metrics` is the per-metric median over them."""
    return RunSummary(
        schema_version=SCHEMA_VERSION,
        name=name,
        complete=complete,
        started_at=started_at,
        config=config,
        environment=environment,
        metrics=median_metrics(trials) if trials else None,
        steps=steps,
        trials=trials if len(trials) > 1 else msgspec.UNSET,
    )
