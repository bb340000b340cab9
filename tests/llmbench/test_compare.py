import json
from pathlib import Path

import numpy as np
import pytest

from llmbench.compare import (
    IMPROVED,
    OK,
    REGRESSION,
    WITHIN_NOISE,
    CompareError,
    compare_runs,
    compare_summaries,
    has_regression,
    parse_metric_spec,
)
from llmbench.stats import bootstrap_ratio_ci, mann_whitney_greater


def trial_metrics(rng: np.random.Generator, slowdown: float, noise: float) -> dict:
    """One trial of a run whose every step takes `slowdown` times as long, with relative noise."""
    jitter = lambda: 1 + rng.normal(0, noise)
    return {
        "output_throughput": 1000 / slowdown * jitter(),
        "request_throughput": 10 / slowdown * jitter(),
        "mean_ttft_ms": 50 * slowdown * jitter(),
        "p99_ttft_ms": 120 * slowdown * jitter(),
        "mean_tpot_ms": 8 * slowdown * jitter(),
        "mean_itl_ms": 8 * slowdown * jitter(),
    }


def summary(trials: list[dict], steps: dict | None = None) -> dict:
    medians = {key: float(np.median([t[key] for t in trials])) for key in trials[0]}
    return {
        "schema_version": 1,
        "name": "synthetic",
        "complete": True,
        "metrics": medians,
        "steps": steps or {},
        "trials": trials if len(trials) > 1 else None,
    }


def synthetic_run(seed: int, slowdown: float = 1.0, noise: float = 0.03, trials: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    return summary([trial_metrics(rng, slowdown, noise) for _ in range(trials)])


def verdict_of(verdicts, metric: str) -> str:
    return next(v.verdict for v in verdicts if v.metric == metric)


def test_a_a_comparison_passes():
    verdicts = compare_summaries(synthetic_run(seed=1), synthetic_run(seed=2))
    assert len(verdicts) == 6
    assert all(v.verdict in (OK, WITHIN_NOISE) for v in verdicts)
    assert all(v.ci_low < 0 < v.ci_high for v in verdicts)
    assert not has_regression(verdicts)


def test_twenty_percent_slowdown_fails_every_metric():
    verdicts = compare_summaries(synthetic_run(seed=1), synthetic_run(seed=2, slowdown=1.2))
    assert [v.verdict for v in verdicts] == [REGRESSION] * 6
    ttft = next(v for v in verdicts if v.metric == "mean_ttft_ms")
    assert ttft.change == pytest.approx(0.2, abs=0.05)
    assert ttft.ci_low > 0.05
    throughput = next(v for v in verdicts if v.metric == "output_throughput")
    assert throughput.change == pytest.approx(1 / 1.2 - 1, abs=0.05)
    assert throughput.ci_high < -0.05
    assert throughput.p_value < 0.01


def test_two_percent_change_inside_noise_passes():
    verdicts = compare_summaries(synthetic_run(seed=3), synthetic_run(seed=4, slowdown=1.02))
    assert not has_regression(verdicts)


def test_noisy_change_beyond_threshold_is_not_called_a_regression():
    # medians differ by about 8%, but trial noise of 10% means the interval straddles the threshold
    base = summary([{"mean_tpot_ms": v} for v in (9.0, 10.0, 11.5)])
    current = summary([{"mean_tpot_ms": v} for v in (9.4, 10.8, 12.0)])
    (verdict,) = compare_summaries(base, current, [parse_metric_spec("mean_tpot_ms")])
    assert verdict.change == pytest.approx(0.08)
    assert verdict.verdict == WITHIN_NOISE


def test_speedup_is_reported_as_improvement():
    verdicts = compare_summaries(synthetic_run(seed=1), synthetic_run(seed=2, slowdown=0.8))
    assert verdict_of(verdicts, "mean_tpot_ms") == IMPROVED
    assert verdict_of(verdicts, "output_throughput") == IMPROVED
    assert not has_regression(verdicts)


def test_single_values_use_the_point_ratio():
    base = summary([{"mean_tpot_ms": 10.0}], steps={"mean_cpu_ms_per_step": 2.0})
    current = summary([{"mean_tpot_ms": 10.4}], steps={"mean_cpu_ms_per_step": 2.2})
    verdicts = compare_summaries(base, current)
    assert [(v.metric, v.verdict) for v in verdicts] == [
        ("mean_tpot_ms", OK),
        ("steps.mean_cpu_ms_per_step", REGRESSION),
    ]
    assert verdicts[1].ci_low is None and verdicts[1].trials == (0, 0)
    generous = [parse_metric_spec("steps.mean_cpu_ms_per_step:50%")]
    assert compare_summaries(base, current, generous)[0].verdict == OK


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
    with pytest.raises(CompareError, match="not valid JSON"):
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


def write(path, summary_dict):
    path.write_text(json.dumps(summary_dict))
    return str(path)


def test_cli_exit_codes(tmp_path):
    from typer.testing import CliRunner

    from llmbench.cli import app

    base = write(tmp_path / "base.json", synthetic_run(seed=1))
    same = write(tmp_path / "same.json", synthetic_run(seed=2))
    slow = write(tmp_path / "slow.json", synthetic_run(seed=2, slowdown=1.2))
    runner = CliRunner()

    passed = runner.invoke(app, ["compare", base, same])
    assert passed.exit_code == 0, passed.output
    assert "mean_tpot_ms" in passed.output and REGRESSION not in passed.output
    failed = runner.invoke(app, ["compare", base, slow, "--metric", "mean_tpot_ms:10%"])
    assert failed.exit_code == 1 and REGRESSION in failed.output
    assert runner.invoke(app, ["compare", base, slow, "--metric", "mean_tpot_ms:50%"]).exit_code == 0
    for bad in (
        [base, str(tmp_path / "missing.json")],
        [base, slow, "--metric", "mean_tpot_ms:fast"],
        [base, slow, "--metric", "mean_nothing_ms"],
        [base],
    ):
        result = runner.invoke(app, ["compare", *bad])
        assert result.exit_code == 2, (bad, result.output)


def test_committed_ci_baseline_gates_cpu_time_per_step(tmp_path):
    """The gate .ci/run applies: the baseline passes against itself, a 5x slower step fails."""
    baseline = Path(__file__).parents[2] / "results" / "baselines" / "ci"
    gate = ["steps.mean_cpu_ms_per_step:300%"]
    assert not has_regression(compare_runs(baseline, baseline, gate))
    slower = json.loads((baseline / "summary.json").read_text())
    slower["steps"]["mean_cpu_ms_per_step"] *= 5
    (tmp_path / "summary.json").write_text(json.dumps(slower))
    (verdict,) = compare_runs(baseline, tmp_path, gate)
    assert verdict.verdict == REGRESSION and verdict.change == pytest.approx(4.0)


def run_dir_with_steps(path: Path, seed: int, cpu_ms_by_trial: list[float]) -> Path:
    """A run directory with repeated trials whose steps.csv carries the trial of every step."""
    path.mkdir()
    run = synthetic_run(seed, trials=len(cpu_ms_by_trial))
    run["steps"] = {"mean_cpu_ms_per_step": float(np.mean(cpu_ms_by_trial))}
    (path / "summary.json").write_text(json.dumps(run))
    lines = ["trial,step,t_start,t_end,schedule_ms,prepare_ms,sample_ms,output_ms,ipc_ms,gpu_ms"]
    for trial, cpu_ms in enumerate(cpu_ms_by_trial):
        half = cpu_ms / 2
        lines += [f"{trial},{s},{s / 100},{s / 100 + 0.005},{half},{half},0,0,0," for s in range(4)]
    (path / "steps.csv").write_text("\n".join(lines) + "\n")
    return path


def test_step_metrics_get_trials_from_steps_csv(tmp_path):
    base = run_dir_with_steps(tmp_path / "base", 1, [0.20, 0.26, 0.17])
    noisy = run_dir_with_steps(tmp_path / "noisy", 2, [0.24, 0.19, 0.29])
    slow = run_dir_with_steps(tmp_path / "slow", 2, [0.50, 0.55, 0.52])
    gate = ["steps.mean_cpu_ms_per_step"]

    (same,) = compare_runs(base, noisy, gate)
    assert same.trials == (3, 3) and same.baseline == pytest.approx(0.20)
    assert same.change == pytest.approx(0.2) and same.verdict == WITHIN_NOISE
    (slower,) = compare_runs(base, slow, gate)
    assert slower.verdict == REGRESSION and slower.ci_low > 0.5
    # a bare summary.json has no step log: one value per side, judged by the point ratio
    (point,) = compare_runs(base / "summary.json", noisy, gate)
    assert point.trials == (0, 3) and point.ci_low is None
