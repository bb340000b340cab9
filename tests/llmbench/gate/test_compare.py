import json

import numpy as np
import pytest

from llmbench.gate.compare import (
    IMPROVED,
    NOT_ENOUGH,
    OK,
    REGRESSION,
    WITHIN_NOISE,
    CompareError,
    compare_runs,
    compare_summaries,
    has_regression,
    parse_metric_spec,
)
from llmbench.metrics.trial_stats import bootstrap_ratio_ci, mann_whitney_greater
from tests.llmbench.gate.synthetic_runs import side, summary, summary_file, synthetic_run


def compare(baseline: dict, current: dict, checks=None):
    """The verdicts on two summary.json contents."""
    return compare_summaries(side(baseline), side(current), checks)


def verdict_of(verdicts, metric: str) -> str:
    return next(v.verdict for v in verdicts if v.metric == metric)


def test_a_a_comparison_passes():
    verdicts = compare(synthetic_run(seed=1, trials=20), synthetic_run(seed=2, trials=20))
    assert len(verdicts) == 6
    assert all(v.verdict == OK for v in verdicts)
    assert all(v.ci_low < 0 < v.ci_high for v in verdicts)
    assert all(0.05 < v.detectable < 0.10 for v in verdicts)  # 20 trials at 3% noise resolve 5%
    assert not has_regression(verdicts)


def test_too_few_trials_to_resolve_the_threshold_is_said_not_passed_silently():
    # 3 trials a side at 5% noise cannot catch a 10% regression, let alone 5%
    verdicts = compare(
        synthetic_run(seed=1, noise=0.05, trials=3), synthetic_run(seed=2, noise=0.05, trials=3)
    )
    assert all(v.verdict == NOT_ENOUGH and v.detectable > 0.10 for v in verdicts)
    assert not has_regression(verdicts)
    generous = [parse_metric_spec("mean_tpot_ms:40%")]
    (verdict,) = compare(
        synthetic_run(seed=1, noise=0.05, trials=3), synthetic_run(seed=2, noise=0.05, trials=3), generous
    )
    assert verdict.verdict == OK and verdict.detectable < 0.80


def test_detectable_regression_is_caught_as_often_as_it_says():
    """At the smallest detectable regression reported by A/A comparisons, the gate fires ~90% of the time."""
    check = [parse_metric_spec("mean_tpot_ms")]

    def judged(seed: int, slowdown: float = 1.0):
        base = synthetic_run(seed=2 * seed, trials=10)
        return compare(base, synthetic_run(seed=2 * seed + 1, slowdown=slowdown, trials=10), check)[0]

    detectable = float(np.median([judged(s).detectable for s in range(20)]))
    assert 0.08 < detectable < 0.14  # 10 trials at 3% noise, 5% threshold
    caught = [judged(100 + s, 1 + detectable).verdict == REGRESSION for s in range(100)]
    assert 0.8 <= np.mean(caught) <= 0.98


def test_two_percent_change_inside_noise_passes():
    verdicts = compare(synthetic_run(seed=3), synthetic_run(seed=4, slowdown=1.02))
    assert not has_regression(verdicts)


def test_noisy_change_beyond_threshold_is_not_called_a_regression():
    # medians differ by about 8%, but trial noise of 10% means the interval straddles the threshold,
    # and three trials at that noise could not have caught even 10%
    base = summary([{"mean_tpot_ms": v} for v in (9.0, 10.0, 11.5)])
    current = summary([{"mean_tpot_ms": v} for v in (9.4, 10.8, 12.0)])
    (verdict,) = compare(base, current, [parse_metric_spec("mean_tpot_ms")])
    assert verdict.change == pytest.approx(0.08)
    assert verdict.verdict == NOT_ENOUGH and verdict.detectable > 0.10
    (lenient,) = compare(base, current, [parse_metric_spec("mean_tpot_ms:300%")])
    assert lenient.verdict == OK


def test_speedup_is_reported_as_improvement():
    verdicts = compare(synthetic_run(seed=1), synthetic_run(seed=2, slowdown=0.8))
    assert verdict_of(verdicts, "mean_tpot_ms") == IMPROVED
    assert verdict_of(verdicts, "output_throughput") == IMPROVED
    assert not has_regression(verdicts)


def test_single_values_use_the_point_ratio():
    base = summary_file({"mean_tpot_ms": 10.0}, {"mean_cpu_ms_per_step": 2.0})
    current = summary_file({"mean_tpot_ms": 10.4}, {"mean_cpu_ms_per_step": 2.2})
    checks = [parse_metric_spec("mean_tpot_ms"), parse_metric_spec("steps.mean_cpu_ms_per_step")]
    verdicts = compare(base, current, checks)
    assert [(v.metric, v.verdict) for v in verdicts] == [
        ("mean_tpot_ms", OK),
        ("steps.mean_cpu_ms_per_step", REGRESSION),
    ]
    assert verdicts[1].ci_low is None and verdicts[1].trials == (0, 0)
    generous = [parse_metric_spec("steps.mean_cpu_ms_per_step:50%")]
    assert compare(base, current, generous)[0].verdict == OK


@pytest.mark.parametrize(
    "spec, name, higher, threshold",
    [
        ("output_throughput", "output_throughput", True, 0.05),
        ("mean_ttft_ms:10%", "mean_ttft_ms", False, 0.10),
        ("p99_itl_ms:0.2", "p99_itl_ms", False, 0.2),
        ("steps.mean_cpu_ms_per_step:150%", "steps.mean_cpu_ms_per_step", False, 1.5),
        ("request_goodput:3%", "request_goodput", True, 0.03),
    ],
)
def test_metric_spec_parsing(spec, name, higher, threshold):
    check = parse_metric_spec(spec)
    assert (check.name, check.higher_is_better) == (name, higher)
    assert check.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("spec", ["mean_ttft_ms:fast", "mean_ttft_ms:-5%", "mean_ttft_ms:0", ":5%", "config"])
def test_bad_metric_specs_are_usage_errors(spec):
    with pytest.raises(CompareError):
        parse_metric_spec(spec)


def test_unknown_metric_and_missing_files_are_usage_errors(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(synthetic_run(seed=1)))
    with pytest.raises(CompareError, match="not found"):
        compare_runs(tmp_path / "a", tmp_path / "a", ["mean_nothing_ms"])
    with pytest.raises(CompareError, match="no such run"):
        compare_runs(tmp_path / "a", tmp_path / "missing")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CompareError, match="not JSON"):
        compare_runs(tmp_path / "a", tmp_path / "broken.json")


def test_json_verdicts_written(tmp_path):
    (tmp_path / "base.json").write_text(json.dumps(synthetic_run(seed=1)))
    (tmp_path / "slow.json").write_text(json.dumps(synthetic_run(seed=2, slowdown=1.2)))
    out = tmp_path / "verdicts.json"
    compare_runs(tmp_path / "base.json", tmp_path / "slow.json", ["mean_tpot_ms:5%"], out)
    payload = json.loads(out.read_text())
    assert payload["regression"] is True
    (row,) = payload["verdicts"]
    assert row["metric"] == "mean_tpot_ms" and row["verdict"] == REGRESSION
    assert row["trials"] == [5, 5]


def test_mann_whitney_exact_and_tied_values():
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1 / 20)
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(1.0)
    assert mann_whitney_greater([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(0.5, abs=0.15)


def test_bootstrap_interval_brackets_the_true_ratio_and_is_seeded():
    rng = np.random.default_rng(0)
    base, current = rng.normal(100, 2, 8), rng.normal(120, 2, 8)
    low, high = bootstrap_ratio_ci(base, current)
    assert 1.1 < low < np.median(current) / np.median(base) < high < 1.3
    assert bootstrap_ratio_ci(base, current) == (low, high)


def test_change_beyond_threshold_inside_the_interval_is_within_noise():
    check = [parse_metric_spec("mean_tpot_ms")]
    (verdict,) = compare(
        synthetic_run(seed=5, trials=20), synthetic_run(seed=6, slowdown=1.06, trials=20), check
    )
    assert verdict.change > 0.05 and verdict.ci_low < 0.05 and verdict.detectable < 0.10
    assert verdict.verdict == WITHIN_NOISE


def test_gpu_busy_is_judged_only_with_a_warning_that_it_is_no_target(caplog):
    with caplog.at_level("WARNING"):
        check = parse_metric_spec("steps.gpu_busy_step_spans:5%")
    assert check.higher_is_better
    assert "GPU busy is a diagnostic, not a target" in caplog.text


def test_runs_at_different_gpu_clocks_are_compared_with_a_warning_that_says_so(caplog):
    """Under a power cap the same code runs slower at a lower clock: a verdict between runs at clocks
    more than 3% apart says so; close clocks, or a run without a reading (a CPU), say nothing."""
    capped = {"sm_clock_mhz": 1500, "limited_fraction": 0.99, "limits": ["sw power cap"]}
    free = {"sm_clock_mhz": 1980, "limited_fraction": 0.0, "limits": []}
    near = {"sm_clock_mhz": 1530, "limited_fraction": 0.9, "limits": ["sw power cap"]}
    warnings = {}
    for name, clock in (("free", free), ("near", near), ("none", None)):
        baseline, current = synthetic_run(seed=0), synthetic_run(seed=1)
        baseline["steps"]["gpu_clock"] = capped
        if clock is not None:
            current["steps"]["gpu_clock"] = clock
        caplog.clear()
        with caplog.at_level("WARNING"):
            compare(baseline, current)
        warnings[name] = caplog.text
    assert "different SM clocks (baseline 1500 MHz, sw power cap 99%, current 1980 MHz)" in warnings["free"]
    assert "SM clocks" not in warnings["near"] and "SM clocks" not in warnings["none"]
