"""The CI regression gate: interleaved runs folded into trials (llmbench/gate/perf_gate.py) and
scripts/perf_gate.sh's usage errors. Its error rates are measured by scripts/perf_gate_calibrate.py, not
here (timing)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from llmbench.gate.compare import (
    ALL_FAILED,
    NOT_ENOUGH,
    OK,
    REGRESSION,
    WITHIN_NOISE,
    Verdict,
    exit_code,
    has_regression,
    parse_metric_spec,
)
from llmbench.gate.wall_gate import (
    MAX_ROUNDS,
    judge,
    measure,
    measure_and_judge,
    quartile_step_mean,
    side_costs,
    step_cpu_ms,
)
from tests.llmbench.gate.synthetic_runs import summary_file
from tests.llmbench.null_run import NULL_RUN

ROOT = Path(__file__).parents[3]
GATE = ROOT / "scripts" / "perf_gate.sh"


def fake_run(path: Path, cpu_ms: list[float], completed: int = 10) -> Path:
    path.mkdir(parents=True)
    lines = ["trial,step,schedule_ms,prepare_ms,output_ms,ipc_ms,cpu_ms"]
    lines += [f"0,{i},0,0,0,0,{ms}" for i, ms in enumerate(cpu_ms)]
    (path / "steps.csv").write_text("\n".join(lines) + "\n")
    (path / "summary.json").write_text(json.dumps(summary_file({"completed": completed})))
    return path


def test_a_side_is_the_mean_of_the_lower_quartile_of_its_runs_at_each_step(tmp_path):
    # each run is interrupted at a different step (5 ms): the quartile at every step leaves them out
    runs = [[5.0, 0.1, 0.3], [0.1, 5.0, 0.3], [0.1, 0.1, 5.0], [0.1, 0.1, 0.3], [0.2, 0.2, 0.4]]
    costs = side_costs([fake_run(tmp_path / f"r{i}", run) for i, run in enumerate(runs)])
    assert costs.shape == (5, 3)
    assert quartile_step_mean(costs) == pytest.approx((0.1 + 0.1 + 0.3) / 3)
    # a machine that slows through the gate: the first run of one side, after a pause, is 15% faster;
    # the quartile is inside the gate for both sides, the fastest would have read a 15% difference
    drift = [fake_run(tmp_path / f"d{i}", [0.1 * (0.85 if i == 0 else 1 + 0.01 * i)] * 3) for i in range(5)]
    even = [fake_run(tmp_path / f"e{i}", [0.1 * (1 + 0.01 * i)] * 3) for i in range(5)]
    assert quartile_step_mean(side_costs(drift)) == quartile_step_mean(side_costs(even))
    # steps that do not line up cannot be matched
    assert side_costs([tmp_path / "r0", fake_run(tmp_path / "short", [0.1, 0.1])]) is None


def noisy_side(tmp_path: Path, name: str, step_ms: float, rng, completed: int = 10) -> list[Path]:
    """8 runs of 50 steps, 5% of steps interrupted for 2-8 ms, one run slowed throughout."""
    dirs = []
    for k in range(8):
        steps = step_ms * (1 + 0.01 * rng.random(50)) + (rng.random(50) < 0.05) * rng.uniform(2, 8, 50)
        steps *= 1.5 if k == 3 else 1.0  # a burst of load over a whole run
        dirs.append(fake_run(tmp_path / name / f"{k:02d}", list(steps), completed))
    return dirs


def test_the_gate_passes_a_a_and_catches_a_twenty_percent_slowdown(tmp_path):
    rng = np.random.default_rng(0)
    check = parse_metric_spec("steps.mean_cpu_ms_per_step:10%")
    base = noisy_side(tmp_path, "base", 0.070, rng)
    (same,) = judge({"baseline": base, "current": noisy_side(tmp_path, "same", 0.070, rng)}, check)
    assert same.verdict == OK and abs(same.change) < 0.02 and same.detectable < 0.2
    assert same.baseline == pytest.approx(0.070, rel=0.01) and same.trials == (8, 8)
    (slow,) = judge({"baseline": base, "current": noisy_side(tmp_path, "slow", 0.084, rng)}, check)
    assert slow.verdict == REGRESSION and slow.change == pytest.approx(0.2, abs=0.01)
    failed = judge(
        {"baseline": base, "current": noisy_side(tmp_path, "failed", 0.070, rng, completed=0)}, check
    )
    assert [(v.metric, v.verdict) for v in failed] == [("completed", ALL_FAILED), (check.name, OK)]
    assert has_regression(failed)
    # steps that do not line up: the run means judge, with their noise
    uneven = noisy_side(tmp_path, "uneven", 0.070, rng)
    fake_run(tmp_path / "uneven-short", [0.07] * 40)
    (means,) = judge({"baseline": base, "current": [*uneven[:-1], tmp_path / "uneven-short"]}, check)
    assert means.verdict in (OK, WITHIN_NOISE, NOT_ENOUGH) and means.trials == (8, 8)


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
    # a later round numbers on, beside the first round's runs
    trees = {"baseline": ROOT, "current": ROOT}
    later = measure(trees, str(config), pairs=1, work=tmp_path / "work", first=2)
    assert [p.name for p in later["current"]] == ["02"] and (tmp_path / "work" / "current" / "00").is_dir()


def test_a_gate_too_noisy_to_decide_measures_another_round_and_a_decided_one_stops(tmp_path):
    check = parse_metric_spec("steps.mean_cpu_ms_per_step:10%")
    # ms a step of each run of a round: one undisturbed run among slowed ones, or all undisturbed
    noisy, quiet = [0.070, 0.210, 0.210, 0.210], [0.070] * 8

    def rounds(name: str, plan: list[list[float]]):
        """measure_round for rounds of runs, the same code on both sides, at the plan's costs."""
        asked, work = [], tmp_path / name

        def measure_round(first: int) -> dict[str, list[Path]]:
            costs = plan[len(asked)]
            asked.append(first)
            return {
                side: [fake_run(work / side / f"{first + k:02d}", [ms] * 50) for k, ms in enumerate(costs)]
                for side in ("baseline", "current")
            }

        return measure_round, asked

    # a half of a noisy round's runs may miss its one undisturbed run: either side reads up to 3x,
    # unresolved; a quiet round after it resolves, judged with all 12 runs a side
    measure_round, asked = rounds("settles", [noisy, quiet])
    runs, (verdict,) = measure_and_judge(measure_round, check)
    assert asked == [0, 4] and verdict.trials == (12, 12) and verdict.verdict == OK
    assert [p.name for p in runs["current"]] == [f"{k:02d}" for k in range(12)]
    # noisy throughout: MAX_ROUNDS rounds, then not enough trials
    measure_round, asked = rounds("stays noisy", [noisy] * MAX_ROUNDS)
    _, (verdict,) = measure_and_judge(measure_round, check)
    assert asked == [4 * k for k in range(MAX_ROUNDS)] and verdict.verdict == NOT_ENOUGH
    # decided at once: one round
    measure_round, asked = rounds("quiet", [quiet])
    assert measure_and_judge(measure_round, check)[1][0].verdict == OK and asked == [0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pairs", "1"], "whole number 2 to 1000"),
        (["--pairs", "many"], "whole number 2 to 1000"),
        (["--threshold", "fast"], "like 10% or 0.1"),
        (["--baseline", "0000000000000000000000000000000000000000"], "not in this clone's history"),
        (["--frobnicate", "1"], "usage"),
    ],
)
def test_gate_usage_errors_exit_2(args, message):
    done = subprocess.run(["bash", str(GATE), *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr


def test_gate_mode_is_instructions_or_wall():
    done = subprocess.run(["bash", str(GATE), "--mode", "cycles"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "--mode takes instructions or wall" in done.stderr


@pytest.mark.parametrize(
    "verdicts, code",
    [
        ([OK], 0),
        ([OK, "improved"], 0),
        ([REGRESSION], 1),
        ([NOT_ENOUGH, REGRESSION], 1),  # a regression is a regression, whatever else could not be judged
        ([ALL_FAILED, OK], 1),
        ([NOT_ENOUGH], 3),
        ([OK, WITHIN_NOISE], 3),
    ],
)
def test_exit_codes_pass_regression_and_cant_tell(verdicts, code):
    rows = [
        Verdict("m", False, 0.1, 1.0, 1.0, 0.0, None, None, None, (5, 5), verdict) for verdict in verdicts
    ]
    assert exit_code(rows) == code
