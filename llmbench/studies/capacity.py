"""`llmbench capacity`: the highest request rate (or concurrency) at which the share of requests meeting
every SLO stays at or above a target, found by the search in capacity_search.py with ordinary runs
against any backend. Each run is a `llmbench run` in a sub-directory; capacity.json holds the probes
and the answer's interval (rewritten after every run), capacity.png the probes' shares, and the
directory's summary.json is the last run at the highest passing load, so `report` and `compare` can
take it."""

from __future__ import annotations

import logging
import math
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from llmbench.config.load import config_label, load_config
from llmbench.config.schema import MAX_RATE, MAX_REQUESTS, MIN_RATE, RunConfig
from llmbench.results.capacity import Capacity, CapacityOptions, CapacityRun, Probe
from llmbench.results.metrics import Metrics
from llmbench.results.summary import RunSummary
from llmbench.run.result_files import default_run_dir
from llmbench.studies.capacity_search import SearchResult, SearchSpace, find_capacity
from llmbench.studies.capacity_view import capacity_plot
from llmbench.studies.study import StudyResult, run_point
from llmbench.studies.sweep import rate_overrides

if TYPE_CHECKING:
    from llmbench.run.progress import Progress

logger = logging.getLogger(__name__)


MAX_PROBE_SECONDS = 86_400  # a day


class CapacityError(ValueError):
    """Unusable search settings (exit code 2)."""


class _Interrupted(Exception):
    """A run was cut short by Ctrl-C: the search stops, keeping what it measured."""


def search_space(options: CapacityOptions, base: RunConfig) -> SearchSpace:
    """The loads the search may probe, from the options and the config's own load; a bound outside the
    config's limits, or bounds out of order, raise CapacityError."""
    integer = options.by == "concurrency"
    lowest = options.lowest if options.lowest is not None else (1.0 if integer else 0.1)
    highest = options.highest if options.highest is not None else (1024.0 if integer else 1000.0)
    start = options.start
    if start is None:
        start = (base.workload.max_concurrency or 8) if integer else base.workload.arrival.rate
    floor, ceiling = (1, MAX_REQUESTS) if integer else (MIN_RATE, MAX_RATE)  # the config's bounds
    if not all(floor <= v <= ceiling for v in (start, lowest, highest)):  # inf and nan fail too
        raise CapacityError(
            f"--start, --lowest and --highest: expected {options.by} >= {floor:g} and <= {ceiling:,.0f}, "
            f"got {start:g}, {lowest:g} and {highest:g}"
        )
    if not 0 <= options.seconds <= MAX_PROBE_SECONDS:  # nan fails too
        raise CapacityError(f"--seconds: expected 0 to {MAX_PROBE_SECONDS:,}, got {options.seconds:g}")
    if integer and any(v != int(v) for v in (start, lowest, highest)):
        raise CapacityError("--start, --lowest and --highest: concurrency takes whole numbers")
    if not 0 < lowest <= start <= highest:
        raise CapacityError(
            f"expected 0 < --lowest ({lowest:g}) <= --start ({start:g}) <= --highest ({highest:g})"
        )
    return SearchSpace(float(start), float(lowest), float(highest), integer, options.tolerance)


def run_capacity(
    config_path: Path,
    overrides: list[str],
    options: CapacityOptions,
    out_dir: Path | None,
    progress: Progress | None = None,
) -> StudyResult:
    base = load_config(config_path, overrides)
    if not base.slo.any:
        raise CapacityError(
            f"{config_label(config_path)}: set slo.ttft_ms, slo.tpot_ms or slo.e2el_ms: the search looks for "
            "the highest load meeting them"
        )
    space = search_space(options, base)
    out_dir = Path(out_dir or default_run_dir(f"{base.name}-capacity"))
    command = ["llmbench", "capacity", str(config_path), *[a for o in overrides for a in ("--set", o)]]
    data = Capacity(command=shlex.join(command), options=options, slo=base.slo, complete=False)
    result = StudyResult(out_dir, data)

    def measure(value: float, repeat: int) -> float:
        label, index = f"{value:g}", len(data.runs)
        directory = f"{index:02d}-{options.by}-{label}-r{repeat}"
        # every run draws its own prompts: a server that outlives the runs (backend openai) must not
        # find an earlier probe's prompts in its prefix cache
        seed = f"workload.seed={base.workload.seed + index}"
        load = _load_overrides(options.by, value, base, options.seconds)
        config = load_config(config_path, [*overrides, *load, seed])
        config.name = f"{base.name} @ {label} {'concurrent' if options.by == 'concurrency' else 'req/s'}"
        logger.info("%s %s, run %d", options.by, label, repeat + 1)
        run = run_point(config, config_path, out_dir / directory, progress, CapacityError)
        share = goodput_share(run.summary.metrics)
        data.runs.append(
            CapacityRun(
                value=value,
                repeat=repeat,
                run_dir=directory,
                goodput_share=share,
                metrics=run.summary.metrics,
            )
        )
        data.save(out_dir / "capacity.json")
        if run.interrupted:
            raise _Interrupted
        return share

    try:
        search = find_capacity(space, measure, options.target, options.repeats, options.max_runs)
    except _Interrupted:
        result.interrupted = True
        return result
    data.passing, data.failing = search.passing, search.failing
    data.probes = probes(search, options.target)
    data.complete = search.complete
    data.save(out_dir / "capacity.json")
    at_answer = [run for run in data.runs if run.value == search.passing]
    if at_answer:  # the last run at the highest passing load stands for the search
        summary = RunSummary.load(out_dir / at_answer[-1].run_dir)
        msgspec.structs.replace(summary, name=base.name).save(out_dir / "summary.json")
    capacity_plot(data, out_dir / "capacity.png")
    return result


def goodput_share(metrics: Metrics | None) -> float:
    """The share of a run's timed requests that met every SLO; failed and unstarted ones did not."""
    if metrics is None:  # no trial finished
        return 0.0
    total = metrics.completed + metrics.failed + (metrics.not_started or 0)
    good = round((metrics.request_goodput or 0.0) * metrics.duration_s)
    return good / total if total else 0.0


def probes(search: SearchResult, target: float) -> list[Probe]:
    """Each load probed, lowest first, with its runs' shares and whether it met the target."""
    return [
        Probe(value=p.value, shares=p.shares, goodput_share=p.share, passed=p.passed(target))
        for p in sorted(search.probes, key=lambda p: p.value)
    ]


# the fewest requests a rate probe sends, so a low rate still gives a share worth judging
MIN_PROBE_REQUESTS = 10


def _load_overrides(by: str, value: float, base: RunConfig, seconds: float) -> list[str]:
    if by == "concurrency":
        return [f"workload.max_concurrency={int(value)}"]
    if not seconds:
        return rate_overrides(value, base)
    requests = min(MAX_REQUESTS, max(MIN_PROBE_REQUESTS, math.ceil(value * seconds)))
    return [*rate_overrides(value, base), f"workload.num_requests={requests}"]
