"""The gate's instruction counts: a tree with a known slowdown in its scheduler counts more
instructions per step than the tree it was copied from, and the gate calls it a regression; the count
is read from real callgrind dumps (slow: two runs under Valgrind, ~1 minute on 2 cores)."""

import shutil
from pathlib import Path

import pytest
import yaml

from llmbench.gate.compare import OK, REGRESSION, parse_metric_spec
from llmbench.gate.instructions import CountError, build_marks, callgrind_total, count_sides
from llmbench.gate.perf_gate import COUNT_METRIC, judge_counts

ROOT = Path(__file__).resolve().parents[3]
TREE = ("llmbench", "engine", "kernels", "configs")
# every Scheduler.schedule() first turns an empty loop 2,000 times: 100-200 k instructions, 10-20% of a
# step of this config
SLOWED = """

def _slowed(method):
    import itertools

    def slowed(self, *args, **kwargs):
        for _ in itertools.repeat(None, 2000):
            pass
        return method(self, *args, **kwargs)

    return slowed


Scheduler.schedule = _slowed(Scheduler.schedule)
"""

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or not Path("/usr/include/valgrind/callgrind.h").is_file(),
    reason="needs valgrind and its headers",
)


def copy_tree(dest: Path) -> Path:
    for name in TREE:
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.slow
@needs_valgrind
def test_a_slowed_scheduler_counts_more_instructions_a_step_and_fails_the_gate(tmp_path):
    slowed = copy_tree(tmp_path / "slowed")
    with open(slowed / "engine" / "scheduling" / "scheduler.py", "a") as f:
        f.write(SLOWED)
    config = yaml.safe_load((ROOT / "configs" / "ci.yaml").read_text())
    config["workload"].update(num_requests=40, warmup_requests=4)
    config_path = tmp_path / "gate.yaml"
    config_path.write_text(yaml.safe_dump(config))
    counts = count_sides({"baseline": ROOT, "current": slowed}, str(config_path), tmp_path / "work")
    base, cur = counts["baseline"], counts["current"]
    # the same workload, step for step; each side counted its own code
    assert base.steps == cur.steps > 40 and base.completed == cur.completed == 40
    assert 0.05 < cur.per_step / base.per_step - 1 < 0.5
    (verdict,) = judge_counts(counts, parse_metric_spec(f"{COUNT_METRIC}:2%"))
    assert verdict.verdict == REGRESSION and verdict.baseline == base.per_step
    # the same tree against itself passes at the gate's threshold
    (same,) = judge_counts({"baseline": base, "current": base}, parse_metric_spec(f"{COUNT_METRIC}:2%"))
    assert same.verdict == OK


def test_the_count_is_the_summary_line_of_a_callgrind_dump(tmp_path):
    dump = tmp_path / "callgrind.out.1.1-01"
    dump.write_text(
        "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 543331753\ntotals: 543331753\n"
    )
    assert callgrind_total(dump) == 543_331_753
    dump.write_text("version: 1\nevents: Ir\n")
    with pytest.raises(CountError, match="no summary line"):
        callgrind_total(dump)


def test_without_valgrind_the_gate_says_so_and_names_the_other_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither valgrind nor a compiler on it
    with pytest.raises(CountError, match="valgrind is not installed.*--mode wall"):
        build_marks(tmp_path / "marks")
