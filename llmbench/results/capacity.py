"""capacity.json: `llmbench capacity`'s search settings, every run with its goodput share, and the
interval the highest load meeting the target lies in (llmbench/studies/capacity.py writes it). Field
order is the file's key order."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from llmbench.config.schema import SloConfig
from llmbench.results.json_file import StudyFile
from llmbench.results.metrics import Metrics, file_metrics, type_metrics


class CapacityOptions(msgspec.Struct, frozen=True):
    """The search's settings, as `llmbench capacity` takes them."""

    by: str = "rate"  # or "concurrency"
    target: float = 0.95  # the goodput share a load must reach
    start: float | None = None  # default: the config's arrival rate or max_concurrency (else 8)
    lowest: float | None = None  # default: 0.1 req/s, or 1
    highest: float | None = None  # default: 1,000 req/s, or 1,024
    tolerance: float = 0.1  # rates: the answer's interval is at most this wide, relative to its bottom
    repeats: int = 3  # runs at each of the two loads that bound the answer
    max_runs: int = 30
    # rates: every probe offers its rate this long (rate x seconds requests); 0 keeps the config's
    # workload.num_requests. A fixed count is a burst at high rates: a few hundred requests sent within
    # a second fit in one large batch and can all meet the SLOs of a server that sustains a fifth of it
    seconds: float = 30.0


class CapacityRun(msgspec.Struct, kw_only=True):
    value: float  # the load: req/s, or concurrent requests
    repeat: int  # 0 for the first run at this load
    run_dir: str
    goodput_share: float  # of the timed requests, those meeting every SLO
    metrics: Metrics | None  # None (`{}` in the file): no trial finished


class Probe(msgspec.Struct, kw_only=True):
    """A load probed: its runs' shares, their mean and whether it meets the target."""

    value: float
    shares: list[float]
    goodput_share: float
    passed: bool


class Capacity(StudyFile, kw_only=True):
    FILE = "capacity.json"
    WHAT = "capacity"

    command: str
    options: CapacityOptions
    # what "meeting every SLO" meant (the target share is in options); unknown for older files
    slo: SloConfig | UnsetType = UNSET
    complete: bool
    runs: list[CapacityRun] = []
    # the answer, once the search is done: the highest load that met the target and the lowest above it
    # that did not (None: none probed)
    passing: float | None | UnsetType = UNSET
    failing: float | None | UnsetType = UNSET
    probes: list[Probe] | UnsetType = UNSET

    @classmethod
    def type_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "runs": [{**r, "metrics": type_metrics(r["metrics"])} for r in data["runs"]]}

    @classmethod
    def file_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "runs": [{**r, "metrics": file_metrics(r["metrics"])} for r in data["runs"]]}


# files written before the type are the first version's shape, without slo where older still
Capacity.MIGRATIONS = {0: dict}
