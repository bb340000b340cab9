import json
from pathlib import Path

import pytest

from engine.nvtx_ranges import nvtx_ranges
from llmbench.profiling import nsys
from llmbench.profiling.nsys_stats import load_stats, parse_stats_csv, stats_csv_path, summarize
from llmbench.profiling.profile_run import profile_run
from llmbench.profiling.report_section import profile_section_html
from llmbench.profiling.window import ProfileError, ProfileWindow, StepRange, parse_steps, window_from_env

DATA = Path(__file__).parent.parent / "data" / "nsys"
PREFIX = DATA / "decode"  # as written by `nsys stats --output tests/data/nsys/decode`


# --steps


@pytest.mark.parametrize(
    "text, expected",
    [("20:30", StepRange(20, 30)), ("5:", StepRange(5, None)), (":8", StepRange(0, 8)), (None, StepRange())],
)
def test_parse_steps(text, expected):
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text", ["30:20", "5:5", "-1:4", "a:b", "7", "1.5:3", ""])
def test_parse_steps_rejects_bad_ranges(text):
    with pytest.raises(ProfileError, match="--steps"):
        parse_steps(text)


def test_step_range_covers_like_a_slice():
    window = StepRange(3, 6)
    assert [step for step in range(10) if window.covers(step)] == [3, 4, 5]
    assert str(window) == "3:6" and str(StepRange(4)) == "4:"


def test_window_round_trips_through_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMBENCH_PROFILE", f"torch:2:5:{tmp_path}")
    window = window_from_env()
    assert (window.tool, window.steps, window.out_dir) == ("torch", StepRange(2, 5), tmp_path)
    monkeypatch.delenv("LLMBENCH_PROFILE")
    assert window_from_env() is None


def test_nsys_window_is_harmless_without_a_gpu(tmp_path):
    window = ProfileWindow("nsys", StepRange(1, 3), tmp_path)
    states = []
    for step in range(5):
        window.before_step(step)
        states.append(window.active)
    assert states == [False, True, True, False, False]
    assert window.done


# NVTX


def test_nvtx_ranges_are_off_without_a_profiler():
    assert nvtx_ranges() is None


# nsys stats parsing


def test_parse_kernel_table():
    rows = parse_stats_csv(stats_csv_path(PREFIX, "cuda_gpu_kern_sum").read_text())
    assert len(rows) == 17
    assert rows[0] == {
        "name": "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
        "total_ms": pytest.approx(48.96),
        "count": 960,
        "avg_ms": pytest.approx(0.051),
        "min_ms": pytest.approx(0.046016),
        "max_ms": pytest.approx(0.056227),
    }
    # a quoted name with commas inside stays whole
    assert rows[8]["name"].startswith(
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAF"
    )
    assert rows[8]["count"] == 640


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


def test_summary_of_captured_decode_stats():
    summary = load_stats(PREFIX)
    steps = summary["steps"]
    assert steps["count"] == 10
    assert steps["total_ms"] == pytest.approx(125.0)
    assert steps["avg_ms"] == pytest.approx(12.5)
    assert (steps["min_ms"], steps["max_ms"]) == (pytest.approx(12.290564), pytest.approx(12.755846))

    phases = {row["name"]: row for row in summary["phases"]}
    assert list(phases) == ["sample", "prepare", "forward", "output", "schedule"]
    assert phases["sample"]["total_ms"] == pytest.approx(94.2)
    assert phases["sample"]["count"] == 10
    assert phases["sample"]["share"] == pytest.approx(94.2 / 125.0)
    assert phases["schedule"]["avg_ms"] == pytest.approx(0.21)

    kernels = summary["kernels"]
    assert kernels["total_ms"] == pytest.approx(112.169)
    assert kernels["count"] == 4610
    assert len(kernels["top"]) == 15
    assert kernels["top"][0]["share"] == pytest.approx(48.96 / 112.169)
    assert kernels["top"][2]["name"] == "_paged_decode_attention_kernel"

    api = summary["cuda_api"]
    assert api["top"][0]["name"] == "cudaStreamSynchronize"
    assert api["count"] == 4751
    assert api["total_ms"] == pytest.approx(120.534)

    idle = summary["gpu_idle"]
    assert idle["total_ms"] == pytest.approx(125.0 - 112.169)
    assert idle["per_step_ms"] == pytest.approx((125.0 - 112.169) / 10)
    assert idle["share"] == pytest.approx((125.0 - 112.169) / 125.0)


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
    assert summary["gpu_idle"] is None  # no kernels captured: nothing to compare against


def test_missing_tables_count_as_empty(tmp_path):
    summary = load_stats(tmp_path / "nsys")
    assert summary["steps"]["count"] == 0 and summary["kernels"]["top"] == []


def test_report_section_renders_the_summary():
    html = profile_section_html({"tool": "nsys", "step_range": "20:30", **load_stats(PREFIX)})
    assert "Profile (nsys, steps 20:30)" in html
    assert "<td>94.200</td>" in html  # sample phase total
    assert "_paged_decode_attention_kernel" in html
    assert "GPU idle between steps: 12.83 ms" in html


# nsys command line


def test_nsys_commands(tmp_path):
    run = ["python", "-m", "llmbench", "run", "c.yaml", "--out", str(tmp_path)]
    command = nsys.profile_command("/opt/nsys", tmp_path, run, ["--sample=none"])
    assert command[:2] == ["/opt/nsys", "profile"]
    assert "--trace=cuda,nvtx,osrt" in command
    assert "--capture-range=cudaProfilerApi" in command and "--capture-range-end=stop" in command
    assert command[-len(run) - 1 :] == ["--sample=none", *run]
    stats = nsys.stats_command("/opt/nsys", tmp_path / "profile.nsys-rep", tmp_path / "nsys")
    assert stats[2:4] == ["--report=nvtx_sum,cuda_gpu_kern_sum,cuda_api_sum", "--format=csv"]
    assert stats[-1] == str(tmp_path / "profile.nsys-rep")
    assert stats_csv_path(tmp_path / "nsys", "nvtx_sum") == tmp_path / "nsys_nvtx_sum.csv"


def test_missing_nsys_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    config = tmp_path / "c.yaml"
    config.write_text("name: c\n")
    with pytest.raises(ProfileError, match="nsys not found: install Nsight Systems or use --torch"):
        profile_run(config, "nsys", StepRange(), tmp_path / "out")


def test_profile_json_is_plain_json():
    summary = load_stats(PREFIX)
    assert json.loads(json.dumps(summary)) == summary
