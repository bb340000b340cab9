"""nsys stats parsing and the profile summary, on the tables captured on the H200."""

import json
from pathlib import Path

import pytest

from llmbench.profiling.nsys_stats import load_stats, parse_stats_csv, stats_csv_path, summarize
from llmbench.profiling.report_section import profile_section_html

DATA = Path(__file__).parent.parent / "data"
RESULTS = Path(__file__).parents[2] / "results" / "h200"
# `llmbench profile configs/llama3-8b-decode.yaml --nsys` on an H200: Llama-3-8B, 256 sequences
# decoding, every optimization off (steps 300:320) and on (steps 45:60); the tables nsys stats wrote
ALL_OFF = DATA / "nsys" / "all_off"
ALL_ON = DATA / "nsys" / "all_on"


# nsys stats parsing


def test_parse_kernel_table():
    rows = parse_stats_csv(stats_csv_path(ALL_ON, "cuda_gpu_kern_sum").read_text())
    assert len(rows) == 31
    assert rows[0] == {
        "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
        "total_ms": pytest.approx(436.059784),
        "count": 3960,
        "avg_ms": pytest.approx(0.1101161),
        "min_ms": pytest.approx(0.087807),
        "max_ms": pytest.approx(0.497054),
    }
    # a quoted name with commas inside stays whole
    assert rows[7]["name"].startswith("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, ")
    assert rows[7]["name"].endswith("const T6 *, const T6 *, const T6 *)")
    assert rows[7]["count"] == 3840


def test_parser_tolerates_preamble_column_order_quotes_and_units():
    text = (
        "Generating SQLite file /tmp/profile.sqlite from /tmp/profile.nsys-rep\n"
        "Processing [/tmp/profile.sqlite] with [/opt/nsys/reports/cuda_api_sum.py]... \n"
        '"Name","Num Calls","Total Time (us)","Time (%)"\n'
        '"cudaLaunchKernel","2,370","14,227.5","60.0"\n'
        '"cudaMemcpyAsync","40","2,814","40.0"\n'
        "\n"
        "Processing [/tmp/profile.sqlite] with [/opt/nsys/reports/nvtx_sum.py]... \n"
    )
    assert parse_stats_csv(text) == [
        {"name": "cudaLaunchKernel", "total_ms": pytest.approx(14.2275), "count": 2370},
        {"name": "cudaMemcpyAsync", "total_ms": pytest.approx(2.814), "count": 40},
    ]


def test_parser_gives_no_rows_for_a_skipped_report():
    text = "SKIPPED: /tmp/profile.sqlite does not contain NV Tools Extension (NVTX) data.\n"
    assert parse_stats_csv(text) == []


def test_summary_of_an_eager_launch_bound_decode():
    summary = load_stats(ALL_OFF)
    steps = summary["steps"]
    assert steps["count"] == 20
    assert steps["total_ms"] == pytest.approx(613.060025)
    assert steps["avg_ms"] == pytest.approx(30.6530013)
    assert (steps["min_ms"], steps["max_ms"]) == (pytest.approx(29.607074), pytest.approx(32.921762))

    # the CUB scan's CCCL range is another domain: left out
    phases = {row["name"]: row for row in summary["phases"]}
    assert list(phases) == ["prepare", "forward", "output", "schedule", "sample"]
    assert phases["prepare"]["total_ms"] == pytest.approx(586.233127)
    assert phases["prepare"]["count"] == 20
    assert phases["prepare"]["share"] == pytest.approx(586.233127 / 613.060025)
    assert phases["sample"]["avg_ms"] == pytest.approx(0.0485203)

    kernels = summary["kernels"]
    assert kernels["total_ms"] == pytest.approx(172.627381)
    assert kernels["count"] == 7440
    assert len(kernels["top"]) == 15
    assert kernels["top"][0]["share"] == pytest.approx(68.197132 / 172.627381)
    assert kernels["top"][1]["name"] == "_decode_kernel"

    api = summary["cuda_api"]
    assert api["top"][0]["name"] == "cuLaunchKernelEx"
    assert api["count"] == 13501
    assert api["total_ms"] == pytest.approx(79.431221)

    # eager launches keep the GPU waiting: kernels run 28% of the step time
    assert summary["kernel_busy_fraction"] == pytest.approx(172.627381 / 613.060025)
    idle = summary["gpu_idle"]
    assert idle["total_ms"] == pytest.approx(613.060025 - 172.627381)
    assert idle["per_step_ms"] == pytest.approx((613.060025 - 172.627381) / 20)
    assert idle["share"] == pytest.approx((613.060025 - 172.627381) / 613.060025)


def test_summary_of_a_graph_replayed_multi_step_decode():
    summary = load_stats(ALL_ON)
    assert summary["steps"]["count"] == 15 and summary["steps"]["total_ms"] == pytest.approx(966.899174)
    phases = {row["name"]: row for row in summary["phases"]}
    assert phases["sample"]["total_ms"] == pytest.approx(773.621521)  # the host waiting on the GPU
    assert phases["forward"]["count"] == 120  # 8 forwards per step
    assert summary["cuda_api"]["top"][0]["name"] == "cudaEventSynchronize"
    assert summary["kernels"]["total_ms"] == pytest.approx(1189.114843)
    # the kernels of the window's steps outlast its host time: the GPU runs behind the host
    assert summary["kernel_busy_fraction"] == pytest.approx(1189.114843 / 966.899174)
    assert summary["gpu_idle"] == {"total_ms": 0.0, "per_step_ms": 0.0, "share": 0.0}


def rounded(value):
    """Floats to 12 significant digits, through lists and dicts: sums taken in another order (the
    GPU machine's Python) differ in the last bits."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return [rounded(item) for item in value] if isinstance(value, list) else value


@pytest.mark.parametrize("prefix, name", [(ALL_OFF, "profile_all_off"), (ALL_ON, "profile_all_on")])
def test_summary_matches_the_committed_h200_profile(prefix, name):
    committed = json.loads((RESULTS / f"{name}.json").read_text())
    summary = load_stats(prefix)
    assert rounded({key: committed[key] for key in summary}) == rounded(summary)


def test_summary_keeps_only_the_llmbench_domain():
    nvtx = [
        {"name": "llmbench:step", "total_ms": 10.0, "count": 1},
        {"name": "llmbench:forward", "total_ms": 4.0, "count": 1, "avg_ms": 4.0},
        {"name": "NCCL:ncclAllReduce", "total_ms": 3.0, "count": 2, "avg_ms": 1.5},
        {"name": ":warmup", "total_ms": 50.0, "count": 1, "avg_ms": 50.0},
    ]
    summary = summarize(nvtx, kernels=[], cuda_api=[])
    assert [row["name"] for row in summary["phases"]] == ["forward"]
    assert summary["steps"]["total_ms"] == 10.0
    # no kernels captured: nothing to compare against
    assert summary["gpu_idle"] is None and summary["kernel_busy_fraction"] is None


def test_missing_tables_count_as_empty(tmp_path):
    summary = load_stats(tmp_path / "nsys")
    assert summary["steps"]["count"] == 0 and summary["kernels"]["top"] == []


def test_report_section_renders_the_summary():
    html = profile_section_html({"tool": "nsys", "step_range": "300:320", **load_stats(ALL_OFF)})
    assert "Profile (nsys, steps 300:320)" in html
    assert "<td>586.233</td>" in html  # prepare phase total
    assert "_decode_kernel" in html
    assert "GPU kernel busy: 28.2%" in html and "ran behind the host" not in html
    assert "GPU idle between steps: 440.43 ms" in html
    html = profile_section_html({"tool": "nsys", "step_range": "45:60", **load_stats(ALL_ON)})
    assert "GPU kernel busy: 123.0%" in html and "ran behind the host" in html
