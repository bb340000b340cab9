"""summary.json: what a run measured, with its config and machine, and why it counts as failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmbench.metrics.requests import median_over_trials

SCHEMA_VERSION = 1
MAX_TRIALS = 1000  # --repeat: each trial's metrics stay in summary.json


def nothing_completed(trial_metrics: list[dict[str, Any]]) -> str | None:
    """Why a finished run counts as failed: no timed request of any trial completed."""
    if any(m["completed"] for m in trial_metrics):
        return None
    failed = sum(m["failed"] for m in trial_metrics)
    return f"no request completed ({failed} failed; see the error column of requests.jsonl)"


def build_summary(
    name: str,
    complete: bool,
    started_at: str,
    config: dict[str, Any],
    environment: dict[str, Any],
    trials: list[dict[str, Any]],
    steps: dict[str, Any],
) -> dict[str, Any]:
    """summary.json's content; with several trials, `metrics` is the per-metric median over them."""
    summary = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "complete": complete,
        "started_at": started_at,
        "config": config,
        "environment": environment,
        "metrics": median_over_trials(trials) if trials else {},
        "steps": steps,
    }
    if len(trials) > 1:
        summary["trials"] = trials
    return summary


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())
