"""llmbench compare on run directories and through the CLI: exit codes, per-step metrics read from
steps.csv, runs whose every request failed or that died before their summary."""

import json
from pathlib import Path

import numpy as np
import pytest

from llmbench.gate.compare import ALL_FAILED, NOT_ENOUGH, REGRESSION, compare_runs, has_regression
from tests.llmbench.gate.synthetic_runs import synthetic_run


def write(path, summary_dict):
    path.write_text(json.dumps(summary_dict))
    return str(path)


def test_cli_exit_codes(tmp_path):
    from typer.testing import CliRunner

    from llmbench.cli import app

    # 20 trials a side at 3% noise resolve 5%: an A/A pass is a pass, not "can't tell"
    base = write(tmp_path / "base.json", synthetic_run(seed=1, trials=20))
    same = write(tmp_path / "same.json", synthetic_run(seed=2, trials=20))
    slow = write(tmp_path / "slow.json", synthetic_run(seed=2, slowdown=1.2, trials=20))
    runner = CliRunner()

    passed = runner.invoke(app, ["compare", base, same])
    assert passed.exit_code == 0, passed.output
    assert "mean_tpot_ms" in passed.output and REGRESSION not in passed.output
    failed = runner.invoke(app, ["compare", base, slow, "--metric", "mean_tpot_ms:10%"])
    assert failed.exit_code == 1 and REGRESSION in failed.output
    assert runner.invoke(app, ["compare", base, slow, "--metric", "mean_tpot_ms:50%"]).exit_code == 0
    # 3 trials a side at 5% noise cannot catch twice 5%: can't tell, which is not a pass
    few = [write(tmp_path / f"few{k}.json", synthetic_run(seed=k, noise=0.05, trials=3)) for k in (1, 2)]
    unsure = runner.invoke(app, ["compare", *few, "--metric", "mean_tpot_ms:5%"])
    assert unsure.exit_code == 3 and NOT_ENOUGH in unsure.output and "can't tell" in unsure.output
    for bad in (
        [base, str(tmp_path / "missing.json")],
        [base, slow, "--metric", "mean_tpot_ms:fast"],
        [base, slow, "--metric", "mean_nothing_ms"],
        [base],
    ):
        result = runner.invoke(app, ["compare", *bad])
        assert result.exit_code == 2, (bad, result.output)


def run_dir_with_steps(path: Path, seed: int, cpu_ms_by_trial: list[float]) -> Path:
    """A run directory with repeated trials whose steps.csv carries the trial of every step."""
    path.mkdir()
    run = synthetic_run(seed, trials=len(cpu_ms_by_trial))
    run["steps"] = {"num_steps": 0, "mean_cpu_ms_per_step": float(np.mean(cpu_ms_by_trial))}
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
    assert same.change == pytest.approx(0.2) and same.verdict == NOT_ENOUGH
    (slower,) = compare_runs(base, slow, gate)
    assert slower.verdict == REGRESSION and slower.ci_low > 0.5
    # a bare summary.json has no step log: one value per side, judged by the point ratio
    (point,) = compare_runs(base / "summary.json", noisy, gate)
    assert point.trials == (0, 3) and point.ci_low is None


def null_run(path: Path, *overrides: str) -> Path:
    from llmbench.config.load import parse_config
    from llmbench.run.runner import run_benchmark
    from tests.llmbench.null_run import NULL_RUN

    run_benchmark(parse_config(NULL_RUN, list(overrides)), path)
    return path


def test_a_run_whose_every_request_failed_is_never_ok(tmp_path):
    from typer.testing import CliRunner

    from llmbench.cli import app

    base = null_run(tmp_path / "base")
    # 2 blocks of 16 tokens cannot hold a 64-token prompt: the engine rejects every request
    rejected = ["engine.num_gpu_blocks=2", "engine.block_size=16", "workload.input={dist: fixed, mean: 64}"]
    failed = null_run(tmp_path / "failed", *rejected)
    gate = ["steps.mean_cpu_ms_per_step:300%"]
    verdicts = compare_runs(base, failed, gate)
    assert [(v.metric, v.verdict) for v in verdicts][0] == ("completed", ALL_FAILED)
    assert verdicts[0].baseline == 12 and verdicts[0].current == 0
    assert has_regression(verdicts)
    result = CliRunner().invoke(app, ["compare", str(base), str(failed), "--metric", gate[0]])
    assert result.exit_code == 1 and ALL_FAILED in result.output
    # the other way round too: a baseline that served nothing judges nothing
    assert compare_runs(failed, base, gate)[0].verdict == ALL_FAILED


def test_a_run_killed_before_its_summary_is_compared_and_flagged_incomplete(tmp_path):
    from typer.testing import CliRunner

    from llmbench.cli import app
    from tests.llmbench.run_dirs import make_run_dir

    base = make_run_dir(tmp_path / "base")
    killed = make_run_dir(tmp_path / "killed", complete=False)
    assert not (killed / "summary.json").exists()
    out = tmp_path / "verdicts.json"
    verdicts = compare_runs(base, killed, ["mean_tpot_ms:50%"], out)
    assert verdicts[0].incomplete == (False, True)
    assert verdicts[0].current == pytest.approx(verdicts[0].baseline)  # same rows, recomputed
    payload = json.loads(out.read_text())
    assert payload["incomplete"] == {"baseline": False, "current": True}
    result = CliRunner().invoke(app, ["compare", str(base), str(killed), "--metric", "mean_tpot_ms:50%"])
    assert result.exit_code == 0 and "incomplete run (current)" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    assert CliRunner().invoke(app, ["compare", str(base), str(empty)]).exit_code == 2


def test_compare_writes_markdown_to_the_step_summary_and_junit(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from llmbench.cli import app

    base = write(tmp_path / "base.json", synthetic_run(seed=1))
    slow = write(tmp_path / "slow.json", synthetic_run(seed=2, slowdown=1.2))
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    junit = tmp_path / "compare.xml"
    args = ["compare", base, slow, "--metric", "mean_tpot_ms:10%", "--metric", "output_throughput:50%"]
    result = CliRunner().invoke(app, [*args, "--markdown", str(tmp_path / "own.md"), "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    text = step_summary.read_text()
    assert text.startswith("earlier step\n") and "llmbench compare: REGRESSION" in text
    assert "| `mean_tpot_ms` |" in text and (tmp_path / "own.md").read_text() in text
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("errors") == "0"
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["mean_tpot_ms"].find("failure").get("message").startswith(REGRESSION)
    assert cases["output_throughput"].find("failure") is None
