"""sweep.json: `llmbench sweep`'s points, one per offered request rate, each with its run's metrics and
step summary (llmbench/studies/sweep.py writes it). Field order is the file's key order."""

from __future__ import annotations

from typing import Any

import msgspec

from llmbench.results.json_file import StudyFile
from llmbench.results.metrics import Metrics, file_metrics, type_metrics
from llmbench.results.steps import Steps, renamed_keys


class Point(msgspec.Struct, kw_only=True):
    rate: float | None  # requests per second offered; None (JSON has no inf): all at once
    label: str  # the rate as shown: "4", "inf"
    run_dir: str
    metrics: Metrics | None  # None (`{}` in the file): no trial finished
    steps: Steps


class Sweep(StudyFile, kw_only=True):
    FILE = "sweep.json"
    WHAT = "sweep"

    command: str
    complete: bool
    points: list[Point] = []

    @classmethod
    def type_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "points": [{**p, "metrics": type_metrics(p["metrics"])} for p in data["points"]]}

    @classmethod
    def file_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "points": [{**p, "metrics": file_metrics(p["metrics"])} for p in data["points"]]}


def _v0_to_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Files written before the type: the oldest have gpu_busy_fraction for gpu_busy_step_spans."""
    return {
        **data,
        "points": [{**p, "steps": renamed_keys(p.get("steps"))} for p in data.get("points") or []],
    }


Sweep.MIGRATIONS = {0: _v0_to_v1}
