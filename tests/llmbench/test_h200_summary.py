"""benchmarks/h200_summary.py: the H200 summary is made from the result files alone, every target with a
met flag, and a missing file leaves its targets "not measured" instead of failing."""

import json
import subprocess
import sys
from pathlib import Path

from tests.llmbench.run_dirs import metrics_with

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "h200_summary.py"


def summarize(directory: Path) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), str(directory)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads((directory / "summary.json").read_text())


def test_targets_come_from_the_files_with_met_flags(tmp_path):
    for name, tok_s in (("throughput_bundled.json", 9000.0), ("throughput_hf.json", 2000.0)):
        run = {"name": name, "complete": True, "config": {}, "steps": {"num_steps": 9}}
        (tmp_path / name).write_text(json.dumps(run | {"metrics": metrics_with(output_throughput=tok_s)}))
    figures = [("all off", 10000.0, {}), ("all on", 19000.0, {"gpu_busy_step_spans": 0.97})]
    variants = [
        {"name": name, "toggles": {}, "metrics": metrics_with(output_throughput=tok_s), "run_dir": ""}
        | {"steps": {"num_steps": 9, **busy}}
        for name, tok_s, busy in figures
    ]
    ablation = {"command": "llmbench ablate", "order": [], "complete": True, "variants": variants}
    (tmp_path / "ablation.json").write_text(json.dumps(ablation))
    rows = [{"num_scheduler_steps": 1, "prepare_ms": 0.4, "host_ms_per_step": 1.2}]
    (tmp_path / "cpu_overhead.json").write_text(json.dumps({"rows": rows}))
    summary = summarize(tmp_path)
    targets = {t["name"]: t for t in summary["targets"]}
    throughput = targets["throughput workload: bundled / HF generate output tok/s"]
    assert throughput["value"] == 4.5 and throughput["met"] is True
    ablation = targets["decode-heavy load: all on / all off"]
    assert ablation["value"] == 1.9 and ablation["met"] is False and ablation["status"] == "missed"
    assert targets["GPU busy (step spans), all on"]["met"] is True
    # host costs are targets from above
    name = "256 decoding sequences, single step, graphs on"
    assert (
        targets[f"{name}: prepare ms"]["met"] is True and targets[f"{name}: host ms a step"]["met"] is False
    )
    # what was not measured says so, with its file
    decode = targets["bs1 decode"]
    assert (
        decode["met"] is None
        and decode["status"] == "not measured"
        and decode["files"] == ["decode_bs1.json"]
    )
    assert "decode_bs1.json" in summary["not_measured"] and "ablation.json" not in summary["not_measured"]
    assert all("met" in t for t in summary["targets"]) and summary["all_met"] is False


def test_the_committed_h200_summary_names_a_file_for_every_figure():
    """A schema check of the published summary (its figures are the measurement's, not the test's): every
    target has a value, a goal and a met flag that agree, and every file it names is published beside it."""
    committed = Path(__file__).parents[2] / "docs" / "measurements" / "h200"
    summary = json.loads((committed / "summary.json").read_text())
    assert set(summary) >= {"command", "targets", "all_met", "reported", "not_measured"}
    for row in summary["targets"]:
        assert {"name", "value", "target", "met", "status", "files"} <= set(row), row["name"]
        if row["value"] is not None:
            at_most = row.get("at_most", False)
            assert row["met"] is (row["value"] <= row["target"] if at_most else row["value"] >= row["target"])
    for row in summary["targets"] + summary["reported"]:
        assert row["files"] and all((committed / name).is_file() for name in row["files"]), row["name"]
    assert summary["all_met"] is all(row["met"] for row in summary["targets"])
