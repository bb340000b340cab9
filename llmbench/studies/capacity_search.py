"""The search behind `llmbench capacity`: the highest load (request rate, or concurrency) whose goodput
share, the fraction of requests meeting every SLO, stays at or above a target.

The share falls as the load rises past what the server sustains, so the answer lies between the
highest load seen to pass and the lowest seen to fail. The search doubles (or halves) the load from a
start until it has one of each, then bisects between them: geometrically for rates, to a relative
width; by integers for concurrency, to neighbours. Each probe runs once; a share is a noisy
measurement, so the two probes that end up bounding the answer are run `repeats` times in all and
judged by their mean share. If that turns a verdict, the search goes on from the new bounds."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SearchSpace:
    start: float
    lowest: float
    highest: float
    integer: bool  # concurrency: whole numbers, bisected until the bounds are neighbours
    tolerance: float = 0.1  # rates: bisected until highest failing <= lowest passing x (1 + tolerance)


@dataclass
class Probe:
    value: float
    shares: list[float] = field(default_factory=list)  # one per run

    @property
    def share(self) -> float:
        return statistics.fmean(self.shares)

    def passed(self, target: float) -> bool:
        return self.share >= target


@dataclass
class SearchResult:
    passing: float | None  # the highest load known to meet the target (None: not even the lowest)
    failing: float | None  # the lowest load known to miss it (None: not even the highest)
    probes: list[Probe]  # in the order first probed
    complete: bool  # False: stopped at the run limit before the bounds were resolved


# measure(value, repeat) -> goodput share of one run at that load (repeat counts from 0)
Measure = Callable[[float, int], float]


def find_capacity(
    space: SearchSpace, measure: Measure, target: float, repeats: int, max_runs: int
) -> SearchResult:
    probes: dict[float, Probe] = {}
    runs = 0

    def run(value: float) -> None:
        nonlocal runs
        probe = probes.setdefault(value, Probe(value))
        probe.shares.append(measure(value, len(probe.shares)))
        runs += 1

    while True:
        passing, failing = _bounds(probes, target)
        value = _next_value(space, passing, failing)
        if value is None:
            short = [v for v in (passing, failing) if v is not None and len(probes[v].shares) < repeats]
            if not short:
                return SearchResult(passing, failing, list(probes.values()), complete=True)
            value = short[0]  # the boundary: run again
        # checked after the bounds, so a search settled by its last allowed run counts as complete
        if runs >= max_runs:
            return SearchResult(passing, failing, list(probes.values()), complete=False)
        run(value)


def _bounds(probes: dict[float, Probe], target: float) -> tuple[float | None, float | None]:
    """(highest passing load below the lowest failing one, lowest failing load); noise can make a load
    pass above one that failed: the failure bounds the answer, the pass above it is disregarded."""
    failing = min((v for v, p in probes.items() if not p.passed(target)), default=None)
    passing = max(
        (v for v, p in probes.items() if p.passed(target) and (failing is None or v < failing)), default=None
    )
    return passing, failing


def _next_value(space: SearchSpace, passing: float | None, failing: float | None) -> float | None:
    """The next load to probe, or None when the bounds are as close as the search goes."""
    if passing is None and failing is None:
        return space.start
    if failing is None:
        return None if passing >= space.highest else _round(space, min(passing * 2, space.highest))
    if passing is None:
        return None if failing <= space.lowest else _round(space, max(failing / 2, space.lowest))
    if space.integer:
        return None if failing - passing <= 1 else (passing + failing) // 2
    middle = _round(space, math.sqrt(passing * failing))
    if failing <= passing * (1 + space.tolerance) or not passing < middle < failing:
        return None
    return middle


def _round(space: SearchSpace, value: float) -> float:
    """Concurrency to a whole number; a rate to 3 significant digits, so labels stay readable."""
    if space.integer:
        return float(round(value))
    return float(f"{value:.3g}")
