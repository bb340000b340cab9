"""The gate's history: one JSON line per gate (commit, date, metric, value, interval, verdict) appended
to a file the user names, and the change points of a metric's series over commits.

A change point is where the series steps to another level and stays there, as asv and Bencher mark
them: the segmentation into levels that best fits the series, each segment costing a penalty that
grows with the series' own noise (estimated from neighbouring records), so noise makes no segments;
then a step smaller than `min_change` of the level before it is merged away. Instruction counts barely
vary, so with them a 1% step is a change point; with wall time the noise decides how small a step
stands out."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import msgspec

HISTORY_SCHEMA_VERSION = 1
PENALTY_FACTOR = 2.0


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
    if len(values) < 2:
        return []
    cuts = _optimal_cuts(values, _penalty(values))
    cuts = _merge_small_steps(values, cuts, min_change)
    bounds = [0, *cuts, len(values)]
    levels = [statistics.fmean(values[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    return [ChangePoint(cut, levels[k], levels[k + 1]) for k, cut in enumerate(cuts)]


def _penalty(values: list[float]) -> float:
    """The cost of one more segment: BIC's 2 ln n times the noise variance, the noise estimated from the
    gaps between neighbours (their median: a few steps do not move it)."""
    gaps = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
    sigma = statistics.median(gaps) / 0.6745 / 2**0.5
    level = statistics.fmean(abs(v) for v in values) or 1.0
    sigma = max(sigma, 1e-9 * level)  # counts can repeat exactly: any step then stands out
    return PENALTY_FACTOR * math.log(len(values)) * sigma**2


def _optimal_cuts(values: list[float], penalty: float) -> list[int]:
    """Optimal partitioning: the cuts minimising the squared deviations from each segment's mean plus
    `penalty` a segment (exact, by dynamic programming over the last cut; O(n^2))."""
    n = len(values)
    sums, squares = [0.0], [0.0]
    for v in values:
        sums.append(sums[-1] + v)
        squares.append(squares[-1] + v * v)

    def cost(a: int, b: int) -> float:
        total = sums[b] - sums[a]
        return squares[b] - squares[a] - total * total / (b - a)

    best = [0.0] + [math.inf] * n
    last = [0] * (n + 1)
    for b in range(1, n + 1):
        for a in range(b):
            candidate = best[a] + cost(a, b) + penalty
            if candidate < best[b]:
                best[b], last[b] = candidate, a
    cuts, b = [], n
    while b > 0:
        b = last[b]
        if b > 0:
            cuts.append(b)
    return sorted(cuts)


def _merge_small_steps(values: list[float], cuts: list[int], min_change: float) -> list[int]:
    """Drop, smallest first, every cut whose two sides' levels differ by less than `min_change`."""
    cuts = list(cuts)
    while cuts:
        bounds = [0, *cuts, len(values)]
        levels = [statistics.fmean(values[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
        steps = [abs(levels[k + 1] - levels[k]) / (abs(levels[k]) or 1.0) for k in range(len(cuts))]
        smallest = min(range(len(cuts)), key=steps.__getitem__)
        if steps[smallest] >= min_change:
            break
        del cuts[smallest]
    return cuts
