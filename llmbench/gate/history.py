"""The gate's history: one JSON line per gate (commit, date, metric, value, interval, verdict) appended
to a file the user names, and the change points of a metric's series over commits.

A change point is where the series steps to another level and stays there, as asv and Bencher mark
them: found by binary segmentation, splitting a stretch of records where the means on either side
differ most, and keeping the split while that difference is larger than `min_change` of the level
before it and larger than four times the noise within the two sides (their pooled standard deviation).
Instruction counts barely vary, so with them a 1% step is a change point; with wall time the noise
decides how small a step stands out."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import msgspec

HISTORY_SCHEMA_VERSION = 1
NOISE_FACTOR = 4.0


class HistoryRecord(msgspec.Struct, kw_only=True):
    commit: str
    date: str  # UTC, ISO 8601
    metric: str  # steps.instructions_per_step or steps.mean_cpu_ms_per_step
    mode: str  # instructions or wall
    value: float  # the current side's
    baseline_value: float
    baseline_commit: str
    change: float  # value / baseline_value - 1
    ci_low: float | None  # the change's 95% interval; None for a count, which has no run-to-run spread
    ci_high: float | None
    threshold: float
    verdict: str
    exit_code: int
    config: str
    host: str
    schema_version: int = HISTORY_SCHEMA_VERSION


class HistoryError(ValueError):
    """An unreadable history file: exit code 2."""


def append_record(path: Path, record: HistoryRecord) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(msgspec.json.encode(record) + b"\n")


def load_history(path: Path) -> list[HistoryRecord]:
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file")
    records = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(msgspec.json.decode(line, type=HistoryRecord))
        except msgspec.DecodeError as e:
            raise HistoryError(f"{path}:{number}: not a gate history record ({e})") from None
    if not records:
        raise HistoryError(f"{path}: holds no record")
    return records


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first record at the new level
    before: float  # mean level before and after
    after: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else float("inf")


def change_points(values: list[float], min_change: float) -> list[ChangePoint]:
    """The indices where the series steps to a new level, in order (see the module's docstring)."""
    found: list[int] = []
    _split(values, 0, len(values), min_change, found)
    cuts = sorted(found)
    bounds = [0, *cuts, len(values)]
    levels = [statistics.fmean(values[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    return [ChangePoint(cut, levels[k], levels[k + 1]) for k, cut in enumerate(cuts)]


def _split(values: list[float], start: int, stop: int, min_change: float, found: list[int]) -> None:
    best, best_gap = None, 0.0
    for cut in range(start + 1, stop):
        left, right = values[start:cut], values[cut:stop]
        gap = abs(statistics.fmean(right) - statistics.fmean(left))
        if gap > best_gap:
            best, best_gap = cut, gap
    if best is None:
        return
    left, right = values[start:best], values[best:stop]
    level = abs(statistics.fmean(left)) or 1.0
    spread = _pooled_std(left, right)
    if best_gap <= min_change * level or best_gap <= NOISE_FACTOR * spread:
        return
    found.append(best)
    _split(values, start, best, min_change, found)
    _split(values, best, stop, min_change, found)


def _pooled_std(left: list[float], right: list[float]) -> float:
    squares = sum((x - statistics.fmean(side)) ** 2 for side in (left, right) for x in side)
    freedom = len(left) + len(right) - 2
    return (squares / freedom) ** 0.5 if freedom > 0 else 0.0
