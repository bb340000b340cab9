"""What `llmbench compare` reads: the metrics to check (`--metric name:threshold`) and each side, a run
directory or a summary.json. A directory killed before it wrote summary.json is read as `llmbench report`
reads it (metrics recomputed from requests.jsonl and steps.csv) and marked incomplete, like a summary that
says complete: false."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from llmbench.device.clocks import clock_mismatch
from llmbench.metrics.steps import summarize_steps
from llmbench.results.files import load_steps
from llmbench.results.json_file import ResultFileError, known
from llmbench.results.metrics import Metrics
from llmbench.results.steps import Steps
from llmbench.results.summary import RunSummary

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.05
_HIGHER_IS_BETTER = re.compile(r"(throughput|goodput|completed|busy|mbu|mfu)[^.]*$")
_LOWER_IS_BETTER = re.compile(r"((_ms|_s|instructions)(_per_[a-z]+)?|failed|preempted)$")


class CompareError(ValueError):
    """Bad input to compare (missing file, unknown metric, bad threshold): exit code 2."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its summary and, with repeated trials and steps.csv beside it, each
    trial's own step summary, so steps.* metrics are judged against trial noise too."""

    summary: RunSummary
    trial_steps: list[Steps] = field(default_factory=list)

    def value(self, name: str) -> float | None:
        """A figure by its `--metric` name: a key of `metrics`, or a dotted path from the top."""
        return figure(self.summary, name if "." in name else f"metrics.{name}")

    def trial_values(self, name: str) -> list[float]:
        """The figure in each trial; none unless at least two trials all have it."""
        trials = known(self.summary.trials) or []
        if name.startswith("steps."):
            steps = self.trial_steps if len(self.trial_steps) == len(trials) else []
            values = [figure(s, name.removeprefix("steps.")) for s in steps]
        else:
            values = [figure(t, name.removeprefix("metrics.")) for t in trials]
        return [v for v in values if v is not None] if len(values) >= 2 and None not in values else []


def figure(root: msgspec.Struct, path: str) -> float | None:
    """The number at a dotted path of a result type (`metrics.p99_ttft_ms`,
    `steps.gpu_clock.limited_fraction`), None where there is none."""
    value: Any = root
    for key in path.split("."):
        if isinstance(value, Metrics | Steps):
            value = value.value(key)
        elif isinstance(value, msgspec.Struct) and key in value.__struct_fields__:
            value = known(getattr(value, key))
        elif isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def load_summary(path: Path) -> Side:
    """A run directory or its summary.json, read as a RunSummary (an older file migrated, a file that
    is none refused), with each trial's steps where the directory has them. `complete` is False for a
    run cut short."""
    path = Path(path)
    if path.is_dir() and not (path / "summary.json").is_file():
        summary = _rebuilt(path)  # warns that the run is incomplete
    else:
        summary = _read(path / "summary.json" if path.is_dir() else path, path)
        if not summary.complete:
            log.warning("%s: incomplete run, judged on what it measured", path)
    return Side(summary, _trial_steps(summary, path) if path.is_dir() else [])


def _read(file: Path, path: Path) -> RunSummary:
    if not file.is_file():
        raise CompareError(f"{path}: no such run directory or summary.json")
    try:
        return RunSummary.load(file)
    except ResultFileError as e:
        raise CompareError(str(e)) from None


def _rebuilt(run_dir: Path) -> RunSummary:
    from llmbench.report.load import ReportError, load_run

    try:
        return load_run(run_dir).summary
    except (ReportError, ResultFileError) as e:
        raise CompareError(f"{run_dir}: no such run directory or summary.json ({e})") from None


@dataclass(frozen=True)
class MetricCheck:
    name: str  # a key of summary "metrics", or a dotted path such as steps.mean_cpu_ms_per_step
    higher_is_better: bool
    threshold: float  # relative: 0.05 allows a 5% change in the bad direction


def metric_direction(name: str) -> bool:
    """True when higher is better, inferred from the metric's name."""
    if _HIGHER_IS_BETTER.search(name):
        return True
    if _LOWER_IS_BETTER.search(name):
        return False
    raise CompareError(f"metric {name!r}: cannot tell whether higher or lower is better")


def parse_metric_spec(spec: str) -> MetricCheck:
    """`name` or `name:threshold`, threshold as a fraction (0.1) or a percentage (10%)."""
    name, _, threshold_text = spec.partition(":")
    if not name:
        raise CompareError(f"--metric {spec!r}: expected name or name:threshold")
    threshold = DEFAULT_THRESHOLD if not threshold_text else _parse_threshold(spec, threshold_text)
    if "busy" in name:
        # neither GPU-busy figure is a goal in itself: a step that launches more work reads busier
        log.warning("%s: GPU busy is a diagnostic, not a target; judged as higher is better", name)
    return MetricCheck(name, metric_direction(name), threshold)


def _parse_threshold(spec: str, text: str) -> float:
    percent = text.endswith("%")
    try:
        value = float(text[:-1] if percent else text)
    except ValueError:
        raise CompareError(f"--metric {spec!r}: threshold {text!r} is not a number like 0.1 or 10%") from None
    value = value / 100 if percent else value
    if not value > 0 or math.isinf(value):
        raise CompareError(f"--metric {spec!r}: threshold must be > 0")
    return value


def _trial_steps(summary: RunSummary, run_dir: Path) -> list[Steps]:
    """Each trial's own step summary from steps.csv; none for a single trial or rows of other trials."""
    trials = known(summary.trials) or []
    if len(trials) < 2 or not (run_dir / "steps.csv").is_file():
        return []
    rows_by_trial: dict[int, list[dict]] = {}
    for row in load_steps(run_dir):
        rows_by_trial.setdefault(row["trial"], []).append(row)
    if sorted(rows_by_trial) != list(range(len(trials))):
        return []
    return [summarize_steps(rows_by_trial[k]) for k in range(len(trials))]


def warn_of_clock_mismatch(baseline: RunSummary, current: RunSummary) -> None:
    """A warning when the two runs' GPUs ran at different clocks (summary steps.gpu_clock)."""
    clocks = [msgspec.to_builtins(known(summary.steps.gpu_clock)) for summary in (baseline, current)]
    note = clock_mismatch(*clocks)
    if note:
        log.warning(note)
