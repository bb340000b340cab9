"""summary.json: what a run measured, with its config and machine, and why it counts as failed. The
sections come from metrics/ and device/ as dicts; here they become a RunSummary (llmbench/results)."""

from __future__ import annotations

from typing import Any

from llmbench.metrics.requests import median_over_trials
from llmbench.results.summary import SCHEMA_VERSION, RunSummary

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


def typed_summary(summary: dict[str, Any]) -> RunSummary:
    """The summary as its declared type. A key with no field there would be dropped from the file
    without a word: that is a field missing in llmbench/results, and fails here instead."""
    typed = RunSummary.from_dict(summary)
    lost = _paths(summary) - _paths(typed.to_dict())
    if lost:
        raise AssertionError(f"summary keys with no field in llmbench/results: {sorted(lost)}")
    return typed


def _paths(data: Any, prefix: str = "") -> set[str]:
    """Every key of nested objects as a dotted path (list items share their list's path)."""
    if isinstance(data, list):
        return {path for item in data for path in _paths(item, prefix)}
    if not isinstance(data, dict) or prefix == "config.":
        return set()
    return {prefix + str(k) for k in data} | {p for k, v in data.items() for p in _paths(v, f"{prefix}{k}.")}
