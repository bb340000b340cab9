"""Regression gate: compare chosen metrics of two runs against relative thresholds, and only call a
change a regression when it is beyond both the threshold and the trial-to-trial noise. Each verdict also
says how large a regression its trials could have caught, and a run that served nothing never passes."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rich import box
from rich.table import Table

from llmbench.gate.load import (
    DEFAULT_THRESHOLD,
    CompareError,
    MetricCheck,
    Side,
    load_summary,
    metric_direction,
    parse_metric_spec,
    warn_of_clock_mismatch,
)
from llmbench.metrics.trial_stats import bootstrap_ratios, detectable_worsening, mann_whitney_greater, ratio

DEFAULT_METRICS = (
    "output_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "mean_itl_ms",
    "steps.mean_cpu_ms_per_step",
)
REGRESSION = "REGRESSION"
IMPROVED = "improved"
WITHIN_NOISE = "within noise"
OK = "ok"
NOT_ENOUGH = "not enough trials"  # a pass these trials could not have told from a regression
ALL_FAILED = "every request failed"
FAILING = (REGRESSION, ALL_FAILED)
# "can't tell": the trials could not have caught twice the threshold, or the change is past the threshold
# while its interval still reaches inside it; exit code 3, neither a pass nor a regression
INCONCLUSIVE = (NOT_ENOUGH, WITHIN_NOISE)
POWER = 0.9  # "detects": the smallest regression flagged this often at the trials' noise
# a pass is only a pass when a regression of this many thresholds would have been caught
RESOLVE_FACTOR = 2.0


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
    detectable: float | None = None  # smallest worsening caught with probability POWER; None without trials
    incomplete: tuple[bool, bool] = (False, False)  # (baseline, current) cut short before they finished


def compare_summaries(
    baseline: Side, current: Side, checks: list[MetricCheck] | None = None
) -> list[Verdict]:
    """Verdicts for the given checks, or for the default metrics present in both summaries; plus an
    ALL_FAILED row for a side that completed no request, whatever the checks."""
    if checks is None:
        checks = [
            MetricCheck(name, metric_direction(name), DEFAULT_THRESHOLD)
            for name in DEFAULT_METRICS
            if baseline.value(name) is not None and current.value(name) is not None
        ]
    for check in checks:
        for label, summary in (("baseline", baseline), ("current", current)):
            if summary.value(check.name) is None:
                raise CompareError(f"metric {check.name!r}: not found in the {label} summary")
    warn_of_clock_mismatch(baseline.summary, current.summary)
    incomplete = (not baseline.summary.complete, not current.summary.complete)
    verdicts = [_judge(check, baseline, current, incomplete) for check in checks]
    completed = (baseline.value("completed"), current.value("completed"))
    return flag_served_nothing(verdicts, completed, incomplete)


def flag_served_nothing(
    verdicts: list[Verdict], completed: tuple[float | None, float | None], incomplete: tuple[bool, bool]
) -> list[Verdict]:
    """A run whose requests all failed measured no serving at all: its step times and zero latencies
    must not pass as "ok", so its `completed` row says so and fails. `completed`: each side's count
    of completed requests (None where unknown)."""
    counts = completed
    if None in counts or min(counts) > 0:
        return verdicts
    verdicts = [v for v in verdicts if v.metric != "completed"]
    row = Verdict(
        metric="completed",
        higher_is_better=True,
        threshold=0.0,
        baseline=counts[0],
        current=counts[1],
        change=ratio(counts[0], counts[1]) - 1,
        ci_low=None,
        ci_high=None,
        p_value=None,
        trials=(0, 0),
        verdict=ALL_FAILED,
        incomplete=incomplete,
    )
    return [row, *verdicts]


def _judge(check: MetricCheck, baseline: Side, current: Side, incomplete: tuple[bool, bool]) -> Verdict:
    base_trials, cur_trials = baseline.trial_values(check.name), current.trial_values(check.name)
    if not (base_trials and cur_trials):
        base_value, cur_value = baseline.value(check.name), current.value(check.name)
        counts = (len(base_trials), len(cur_trials))
        return decide(check, base_value, cur_value, None, None, counts, incomplete)
    # one-sided: the current side worse means lower for a throughput, higher for a latency
    if check.higher_is_better:
        p_value = mann_whitney_greater(cur_trials, base_trials)
    else:
        p_value = mann_whitney_greater(base_trials, cur_trials)
    return decide(
        check,
        statistics.median(base_trials),
        statistics.median(cur_trials),
        bootstrap_ratios(base_trials, cur_trials),
        p_value,
        (len(base_trials), len(cur_trials)),
        incomplete,
    )


def decide(
    check: MetricCheck,
    base_value: float,
    cur_value: float,
    ratios: np.ndarray | None,
    p_value: float | None,
    trials: tuple[int, int],
    incomplete: tuple[bool, bool] = (False, False),
) -> Verdict:
    """The verdict on one metric from its two values and, with trials, the bootstrap distribution of
    current / baseline: a regression only when the whole 95% interval is beyond the threshold."""

    def worsening(r: float) -> float:
        """How much worse a ratio current/baseline is, as a positive fraction; negative is better."""
        return 1 - r if check.higher_is_better else r - 1

    point = ratio(base_value, cur_value)
    ci_low = ci_high = detectable = None
    least_bad = most_bad = worsening(point)
    if ratios is not None:
        low, high = (float(q) for q in np.quantile(ratios, [0.025, 0.975]))
        ci_low, ci_high = low - 1, high - 1
        least_bad, most_bad = sorted((worsening(low), worsening(high)))
        detectable = detectable_worsening(ratios, point, check.threshold, check.higher_is_better, POWER)
    if least_bad > check.threshold:
        verdict = REGRESSION
    elif most_bad < -check.threshold:
        verdict = IMPROVED
    elif detectable is not None and detectable > RESOLVE_FACTOR * check.threshold:
        verdict = NOT_ENOUGH
    elif abs(worsening(point)) > check.threshold:
        verdict = WITHIN_NOISE
    else:
        verdict = OK
    return Verdict(
        metric=check.name,
        higher_is_better=check.higher_is_better,
        threshold=check.threshold,
        baseline=base_value,
        current=cur_value,
        change=point - 1,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        trials=trials,
        verdict=verdict,
        detectable=detectable,
        incomplete=incomplete,
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
        write_verdicts(json_path, str(baseline), str(current), verdicts)
    return verdicts


def write_verdicts(path: Path, baseline: str, current: str, verdicts: list[Verdict]) -> None:
    """The verdicts as JSON, for later steps of a pipeline."""
    payload = {
        "baseline": baseline,
        "current": current,
        "regression": has_regression(verdicts),
        "resolved": all(v.verdict not in INCONCLUSIVE for v in verdicts),
        "incomplete": dict(zip(("baseline", "current"), verdicts[0].incomplete, strict=True)),
        "verdicts": [asdict(v) for v in verdicts],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def has_regression(verdicts: list[Verdict]) -> bool:
    """A metric beyond its threshold and the noise, or a run that served nothing: exit code 1."""
    return any(v.verdict in FAILING for v in verdicts)


def is_inconclusive(verdicts: list[Verdict]) -> bool:
    """No regression, but some metric the trials could not judge: exit code 3."""
    return not has_regression(verdicts) and any(v.verdict in INCONCLUSIVE for v in verdicts)


EXIT_WORDS = {0: "pass", 1: "REGRESSION", 3: "can't tell"}


def exit_code(verdicts: list[Verdict]) -> int:
    """0 pass, 1 regression (or a side that served nothing), 3 can't tell."""
    return 1 if has_regression(verdicts) else 3 if is_inconclusive(verdicts) else 0


_VERDICT_STYLE = {
    REGRESSION: "bold red",
    ALL_FAILED: "bold red",
    IMPROVED: "green",
    WITHIN_NOISE: "yellow",
    NOT_ENOUGH: "yellow",
    OK: "green",
}


def format_value(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _verdict_text(v: Verdict) -> str:
    text = f"{NOT_ENOUGH} to detect {v.threshold:.0%}" if v.verdict == NOT_ENOUGH else v.verdict
    return f"[{_VERDICT_STYLE[v.verdict]}]{text}[/]"


def verdict_table(verdicts: list[Verdict]) -> Table:
    """Limit is the change allowed in the bad direction: -5% for throughputs, +5% for latencies.
    Detects is the smallest regression these trials flag 90% of the time (power); a pass whose trials
    could not catch twice the limit says "not enough trials"."""
    incomplete = verdicts[0].incomplete if verdicts else (False, False)
    sides = [side for side, cut in zip(("baseline", "current"), incomplete, strict=True) if cut]
    caption = f"* incomplete run ({' and '.join(sides)}): judged on what it measured" if sides else None
    table = Table(title="llmbench compare", box=box.SIMPLE_HEAD, caption=caption)
    table.add_column("metric", no_wrap=True)
    for header in ("baseline", "current", "change", "95% CI", "p", "limit", "detects"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    marks = ["*" if cut else "" for cut in incomplete]
    for v in verdicts:
        ci = "-" if v.ci_low is None else f"{v.ci_low:+.0%}..{v.ci_high:+.0%}"
        sign = -1 if v.higher_is_better else 1
        table.add_row(
            v.metric,
            format_value(v.baseline) + marks[0],
            format_value(v.current) + marks[1],
            f"{v.change:+.1%}",
            ci,
            "-" if v.p_value is None else f"{v.p_value:.2f}",
            "-" if v.verdict == ALL_FAILED else f"{sign * v.threshold:+.0%}",
            "-" if v.detectable is None else _detectable(sign * v.detectable),
            _verdict_text(v),
        )
    return table


def _detectable(signed: float) -> str:
    return "none" if math.isinf(signed) else f"{signed:+.0%}"
