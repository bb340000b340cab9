"""Reading the H200 result files for benchmarks/h200_summary.py: each JSON file once (a missing one noted,
not fatal), the target row with its met flag, and the lookups every target makes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
            if name not in self.missing:
                self.missing.append(name)
            return None


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


def throughput(summary: dict[str, Any] | None) -> float | None:
    return ((summary or {}).get("metrics") or {}).get("output_throughput")


def variant(ablation: dict[str, Any] | None, name: str) -> dict[str, Any]:
    variants = (ablation or {}).get("variants") or []
    return next((v for v in variants if v.get("name") == name), {})


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
