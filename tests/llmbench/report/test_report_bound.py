"""The report's bound section: the run's throughput beside its bound's, the fraction, and the ceilings
with how they were measured, under friendly labels; a run without a bound says why, and a result file
from before the bound shows no section. `llmbench compare` checks none of it by default."""

import json
import re

from llmbench.gate.compare import DEFAULT_METRICS, compare_summaries
from llmbench.gate.load import metric_direction
from llmbench.report import write_report
from tests.llmbench.gate.synthetic_runs import side, summary_file
from tests.llmbench.run_dirs import make_run_dir, study_dir, visible

BOUND = {
    "bound_s": 1.98,
    "bound_output_throughput": 16_517.0,
    "throughput_of_bound": 0.684,
    "ceiling_gemm_flops_per_s": 7.61e14,
    "ceiling_copy_bytes_per_s": 4.05e12,
    "ceilings_device": "NVIDIA H200",
    "ceilings_dtype": "bfloat16",
    "ceilings_method": "8192x8192x8192 bfloat16 matmul and a 1024 MiB copy (bytes read + written)",
}


def page_with(tmp_path, steps: dict) -> str:
    run = make_run_dir(tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary["steps"].update(steps)
    (run / "summary.json").write_text(json.dumps(summary))
    html = write_report([run], run).read_text()
    return re.sub(r"<script.*?</script>", "", html, flags=re.S)


def section(page: str) -> str:
    start = page.index("<h2>Against the physical bound</h2>")
    return page[start : page.index("<h2>", start + 1)]


def test_the_bound_shows_with_labels_units_and_the_ceilings_method(tmp_path):
    shown = section(page_with(tmp_path, BOUND))
    for label in ("Fraction of bound", "Bound output throughput (tok/s)", "Bound time (s)", "GEMM ceiling"):
        assert label in shown
    assert "68.4%" in shown and "16,517" in shown and "761 TFLOP/s" in shown and "4,050 GB/s" in shown
    assert "NVIDIA H200: 8192x8192x8192 bfloat16 matmul" in shown
    assert "throughput_of_bound" not in shown  # key names never reach the page


def test_a_cpu_run_s_ceilings_read_in_a_unit_that_fits(tmp_path):
    cpu = {**BOUND, "ceiling_gemm_flops_per_s": 2.03e10, "ceiling_copy_bytes_per_s": 1.61e10}
    shown = section(page_with(tmp_path, cpu))
    assert "20.3 GFLOP/s" in shown and "16.1 GB/s" in shown and "0.0 TFLOP/s" not in shown


NULL = {
    "bound_s": None,
    "bound_output_throughput": None,
    "throughput_of_bound": None,
    "bound_unavailable": "model.executor null: no model runs, so its roofline does not apply",
}


def test_without_a_bound_one_line_says_why_instead_of_a_table_and_an_older_file_shows_nothing(tmp_path):
    page = page_with(tmp_path / "null", NULL)
    assert f"No physical bound: {NULL['bound_unavailable']}." in page
    assert "Against the physical bound" not in page and "Fraction of bound" not in page
    assert "Against the physical bound" not in page_with(tmp_path / "old", {})


def test_a_study_without_a_bound_has_no_table_of_n_a(tmp_path):
    for kind, labels in (("ablation", ["all off", "+chunked_prefill"]), ("sweep", ["10", "40"])):
        root = study_dir(tmp_path / kind, kind, labels)
        data = json.loads((root / f"{kind}.json").read_text())
        for entry in data["variants" if kind == "ablation" else "points"]:
            entry["steps"].update(NULL)
        (root / f"{kind}.json").write_text(json.dumps(data))
        page = visible(write_report([root], root).read_text())
        assert "Against the physical bound" not in page and "No physical bound: model.executor null" in page


def test_compare_checks_the_bound_only_when_named_and_the_fraction_as_higher_is_better():
    assert not any("bound" in name or "ceiling" in name for name in DEFAULT_METRICS)
    assert metric_direction("steps.throughput_of_bound") and metric_direction("steps.bound_output_throughput")
    run = side(summary_file({"completed": 4, "output_throughput": 100.0}, BOUND))
    checked = [v.metric for v in compare_summaries(run, run)]
    assert "output_throughput" in checked and not any("bound" in name for name in checked)
