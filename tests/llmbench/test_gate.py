"""The CI regression gate: interleaved runs folded into trials (llmbench/gate.py) and scripts/perf_gate.sh's
usage errors. Its error rates are measured by scripts/perf_gate_calibrate.py, not here (timing)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from llmbench.compare import REGRESSION, compare_summaries, parse_metric_spec
from llmbench.gate import GateError, fastest_step_mean, fold, measure, step_cpu_ms
from tests.llmbench.conftest import NULL_RUN

ROOT = Path(__file__).parents[2]
GATE = ROOT / "scripts" / "perf_gate.sh"


def fake_run(path: Path, cpu_ms: list[float], completed: int = 10) -> Path:
    path.mkdir(parents=True)
    lines = ["trial,step,schedule_ms,prepare_ms,output_ms,ipc_ms,cpu_ms"]
    lines += [f"0,{i},0,0,0,0,{ms}" for i, ms in enumerate(cpu_ms)]
    (path / "steps.csv").write_text("\n".join(lines) + "\n")
    (path / "summary.json").write_text(json.dumps({"complete": True, "metrics": {"completed": completed}}))
    return path


def test_a_trial_is_the_mean_of_the_fastest_run_at_each_step(tmp_path):
    # each run is interrupted at a different step (5 ms): the fastest at every step leaves them out
    runs = [[5.0, 0.1, 0.3], [0.1, 5.0, 0.3], [0.1, 0.1, 5.0], [0.2, 0.2, 0.4]]
    costs = [step_cpu_ms(fake_run(tmp_path / f"r{i}", run)) for i, run in enumerate(runs)]
    assert fastest_step_mean(costs) == pytest.approx((0.1 + 0.1 + 0.3) / 3)
    # steps that do not line up cannot be matched: the lowest run mean
    uneven = costs[:3] + [step_cpu_ms(fake_run(tmp_path / "short", [0.1, 0.1]))]
    assert fastest_step_mean(uneven) == pytest.approx(0.1)


def test_fold_groups_consecutive_runs_into_trials_that_compare_judges(tmp_path):
    rng = np.random.default_rng(0)

    def side(name: str, step_ms: float, completed: int = 10) -> list[Path]:
        # 8 runs of 50 steps, each step now and then interrupted for 2-8 ms
        dirs = []
        for k in range(8):
            steps = step_ms * (1 + 0.01 * rng.random(50)) + (rng.random(50) < 0.1) * rng.uniform(2, 8, 50)
            dirs.append(fake_run(tmp_path / name / f"{k:02d}", list(steps), completed))
        return dirs

    base = fold(side("base", 0.070), group=4)
    assert len(base["trials"]) == 2 and base["metrics"]["completed"] == 10
    assert base["steps"]["mean_cpu_ms_per_step"] == pytest.approx(0.070, rel=0.01)
    slow = fold(side("slow", 0.084), group=4)  # every step 20% slower
    (verdict,) = compare_summaries(base, slow, [parse_metric_spec("steps.mean_cpu_ms_per_step:10%")])
    assert verdict.change == pytest.approx(0.2, abs=0.01) and verdict.verdict == REGRESSION
    assert fold(side("failed", 0.070, completed=0), group=4)["metrics"]["completed"] == 0
    with pytest.raises(GateError, match="fewer than 2 trials"):
        fold(side("few", 0.070)[:7], group=4)


def test_measure_alternates_the_sides_with_each_trees_own_code(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(NULL_RUN))
    runs = measure({"baseline": ROOT, "current": ROOT}, str(config), pairs=2, work=tmp_path / "work")
    assert [p.name for p in runs["baseline"]] == ["00", "01"] == [p.name for p in runs["current"]]
    # A B, then B A: neither side always runs first
    started = {p: (p / "config.yaml").stat().st_mtime_ns for side in runs.values() for p in side}
    order = sorted(started, key=started.get)
    assert [p.parent.name for p in order] == ["baseline", "current", "current", "baseline"]
    assert all(step_cpu_ms(p)[0].size > 0 for p in order)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pairs", "3", "--group", "2"], "at least 2 trials"),
        (["--pairs", "many"], "whole numbers"),
        (["--baseline", "0000000000000000000000000000000000000000"], "not in this clone's history"),
        (["--frobnicate", "1"], "usage"),
    ],
)
def test_gate_usage_errors_exit_2(args, message):
    done = subprocess.run(["bash", str(GATE), *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr
