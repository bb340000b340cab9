"""Reading the H200 result files for benchmarks/h200_summary.py: each JSON file once (a missing one noted,
not fatal; a run summary or an ablation through its declared type), the target row with its met flag,
and the lookups every target makes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmbench.results.ablation import Ablation, Variant
from llmbench.results.json_file import ResultFileError
from llmbench.results.summary import RunSummary


class Files:
    """The result directory's JSON files, read once; the names asked for and missing are kept."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.missing: list[str] = []

    def get(self, name: str) -> dict[str, Any] | None:
        path = self.directory / name
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            self._missed(name)
            return None

    def ablation(self, name: str) -> Ablation | None:
        try:
            return Ablation.load(self.directory / name)
        except ResultFileError:
            return self._missed(name)

    def run(self, name: str) -> RunSummary | None:
        """A run's summary.json, kept under another name."""
        try:
            return RunSummary.load(self.directory / name)
        except ResultFileError:
            return self._missed(name)

    def _missed(self, name: str) -> None:
        if name not in self.missing:
            self.missing.append(name)


def target(
    name: str, value: float | None, goal: float, files: list[str], unit: str = "", at_most: bool = False
) -> dict[str, Any]:
    """`value >= goal` (`<=` with at_most); not measured (met null) when the value is unknown."""
    met = None if value is None else bool(value <= goal if at_most else value >= goal)
    status = "not measured" if met is None else ("met" if met else "missed")
    return {
        "name": name,
        "value": value,
        "target": goal,
        "at_most": at_most,
        "unit": unit,
        "met": met,
        "status": status,
        "files": files,
    }


def throughput(measured: RunSummary | Variant | None) -> float | None:
    metrics = measured.metrics if measured else None
    return metrics.output_throughput if metrics else None


def variant(ablation: Ablation | None, name: str) -> Variant | None:
    return next((v for v in ablation.variants if v.name == name), None) if ablation else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
