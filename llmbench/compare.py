"""Regression gate: compare chosen metrics of two runs against relative thresholds, and only call a
change a regression when it is beyond both the threshold and the trial-to-trial noise."""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from rich import box
from rich.table import Table

from llmbench.results import load_steps
from llmbench.stats import bootstrap_ratio_ci, mann_whitney_greater, ratio
from llmbench.step_stats import summarize_steps

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.05
DEFAULT_METRICS = (
    "output_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "mean_itl_ms",
    "steps.mean_cpu_ms_per_step",
)
_HIGHER_IS_BETTER = re.compile(r"(throughput|goodput|completed|busy|mbu|mfu)[^.]*$")
_LOWER_IS_BETTER = re.compile(r"((_ms|_s)(_per_[a-z]+)?|failed|preempted)$")

REGRESSION = "REGRESSION"
IMPROVED = "improved"
WITHIN_NOISE = "within noise"
OK = "ok"


class CompareError(ValueError):
    """Bad input to compare (missing file, unknown metric, bad threshold): exit code 2."""


@dataclass(frozen=True)
class MetricCheck:
    name: str  # a key of summary "metrics", or a dotted path such as steps.mean_cpu_ms_per_step
    higher_is_better: bool
    threshold: float  # relative: 0.05 allows a 5% change in the bad direction


@dataclass
class Verdict:
    metric: str
    higher_is_better: bool
    threshold: float
    baseline: float  # median over trials when both sides have them, else the summary value
    current: float
    change: float  # current / baseline - 1
    ci_low: float | None  # bootstrap interval of the change; None without trials
    ci_high: float | None
    p_value: float | None  # one-sided Mann-Whitney U, current worse than baseline
    trials: tuple[int, int]
    verdict: str


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


def load_summary(path: Path) -> dict:
    """A run directory or its summary.json."""
    file = path / "summary.json" if path.is_dir() else path
    if not file.is_file():
        raise CompareError(f"{path}: no such run directory or summary.json")
    try:
        summary = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise CompareError(f"{file}: not valid JSON ({e.msg})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("metrics"), dict):
        raise CompareError(f"{file}: not an llmbench summary (no 'metrics')")
    if not summary.get("complete", True):
        log.warning("%s is from an incomplete run", file)
    if path.is_dir():
        _attach_trial_steps(summary, path)
    return summary


def _attach_trial_steps(summary: dict, run_dir: Path) -> None:
    """Give each trial its own step summary from steps.csv, so steps.* metrics are judged against
    trial noise too rather than as one point each."""
    trials = summary.get("trials") or []
    if len(trials) < 2 or any("steps" in trial for trial in trials) or not (run_dir / "steps.csv").is_file():
        return
    rows_by_trial: dict[int, list[dict]] = {}
    for row in load_steps(run_dir):
        rows_by_trial.setdefault(row["trial"], []).append(row)
    if sorted(rows_by_trial) != list(range(len(trials))):
        return
    for k, trial in enumerate(trials):
        trial["steps"] = summarize_steps(rows_by_trial[k])


def _lookup(root: dict, path: str) -> float | None:
    value = root
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _summary_value(summary: dict, name: str) -> float | None:
    return _lookup(summary, name if "." in name else f"metrics.{name}")


def _trial_values(summary: dict, name: str) -> list[float]:
    values = [_lookup(trial, name) for trial in summary.get("trials") or []]
    return [v for v in values if v is not None] if len(values) >= 2 and None not in values else []


def compare_summaries(
    baseline: dict, current: dict, checks: list[MetricCheck] | None = None
) -> list[Verdict]:
    """Verdicts for the given checks, or for the default metrics present in both summaries."""
    if checks is None:
        checks = [
            MetricCheck(name, metric_direction(name), DEFAULT_THRESHOLD)
            for name in DEFAULT_METRICS
            if _summary_value(baseline, name) is not None and _summary_value(current, name) is not None
        ]
    for check in checks:
        for label, summary in (("baseline", baseline), ("current", current)):
            if _summary_value(summary, check.name) is None:
                raise CompareError(f"metric {check.name!r}: not found in the {label} summary")
    return [_judge(check, baseline, current) for check in checks]


def _judge(check: MetricCheck, baseline: dict, current: dict) -> Verdict:
    def worsening(r: float) -> float:
        """How much worse a ratio current/baseline is, as a positive fraction; negative is better."""
        return 1 - r if check.higher_is_better else r - 1

    base_trials, cur_trials = _trial_values(baseline, check.name), _trial_values(current, check.name)
    ci_low = ci_high = p_value = None
    if base_trials and cur_trials:
        base_value, cur_value = statistics.median(base_trials), statistics.median(cur_trials)
        low, high = bootstrap_ratio_ci(base_trials, cur_trials)
        ci_low, ci_high = low - 1, high - 1
        least_bad, most_bad = sorted((worsening(low), worsening(high)))
        # one-sided: the current side worse means lower for a throughput, higher for a latency
        if check.higher_is_better:
            p_value = mann_whitney_greater(cur_trials, base_trials)
        else:
            p_value = mann_whitney_greater(base_trials, cur_trials)
    else:
        base_value, cur_value = _summary_value(baseline, check.name), _summary_value(current, check.name)
    point = worsening(ratio(base_value, cur_value))
    if ci_low is None:
        least_bad = most_bad = point
    # the whole interval must clear the threshold; a point beyond it alone may be noise
    if least_bad > check.threshold:
        verdict = REGRESSION
    elif most_bad < -check.threshold:
        verdict = IMPROVED
    elif abs(point) > check.threshold:
        verdict = WITHIN_NOISE
    else:
        verdict = OK
    return Verdict(
        metric=check.name,
        higher_is_better=check.higher_is_better,
        threshold=check.threshold,
        baseline=base_value,
        current=cur_value,
        change=ratio(base_value, cur_value) - 1,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        trials=(len(base_trials), len(cur_trials)),
        verdict=verdict,
    )


def compare_runs(
    baseline: Path, current: Path, metric_specs: list[str] | None = None, json_path: Path | None = None
) -> list[Verdict]:
    """Load both runs, judge the metrics (defaults when no specs are given), optionally save as JSON."""
    checks = [parse_metric_spec(spec) for spec in metric_specs] if metric_specs else None
    verdicts = compare_summaries(load_summary(baseline), load_summary(current), checks)
    if not verdicts:
        raise CompareError("the two runs share none of the default metrics; name some with --metric")
    if json_path is not None:
        payload = {
            "baseline": str(baseline),
            "current": str(current),
            "regression": has_regression(verdicts),
            "verdicts": [asdict(v) for v in verdicts],
        }
        json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return verdicts


def has_regression(verdicts: list[Verdict]) -> bool:
    return any(v.verdict == REGRESSION for v in verdicts)


_VERDICT_STYLE = {REGRESSION: "bold red", IMPROVED: "green", WITHIN_NOISE: "yellow", OK: "green"}


def _value(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def verdict_table(verdicts: list[Verdict]) -> Table:
    """Limit is the change allowed in the bad direction: -5% for throughputs, +5% for latencies."""
    table = Table(title="llmbench compare", box=box.SIMPLE_HEAD)
    table.add_column("metric", no_wrap=True)
    for header in ("baseline", "current", "change", "95% CI", "p", "limit"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for v in verdicts:
        ci = "-" if v.ci_low is None else f"{v.ci_low:+.0%}..{v.ci_high:+.0%}"
        table.add_row(
            v.metric,
            _value(v.baseline),
            _value(v.current),
            f"{v.change:+.1%}",
            ci,
            "-" if v.p_value is None else f"{v.p_value:.2f}",
            f"{-v.threshold if v.higher_is_better else v.threshold:+.0%}",
            f"[{_VERDICT_STYLE[v.verdict]}]{v.verdict}[/]",
        )
    return table
