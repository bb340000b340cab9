"""nsys stats parsing and the profile summary, on the tables captured on the H200."""

import gzip
import json
from pathlib import Path

import pytest

from llmbench.profiling.kernel_kinds import kernel_kind
from llmbench.profiling.nsys_stats import (
    kernel_timeline,
    load_stats,
    parse_stats_csv,
    parse_trace_csv,
    stats_csv_path,
    summarize,
)
from llmbench.profiling.report_section import profile_section_html

DATA = Path(__file__).parents[2] / "data"
# `llmbench profile configs/llama3-8b-decode.yaml --nsys` on an H200 (benchmarks/h200_ablate_profile.sh):
# Llama-3-8B, 256 sequences decoding, every optimization off (steps 300:310) and on (steps 45:48); the
# tables nsys stats wrote, the kernel trace gzipped, and the profile.json the run wrote from them
# (published as docs/measurements/h200/profile_all_off.json and profile_all_on.json)
ALL_OFF = DATA / "nsys" / "all_off"
ALL_ON = DATA / "nsys" / "all_on"


@pytest.fixture
def tables(tmp_path):
    """The prefix of a captured profile's tables in tmp_path, its kernel trace unpacked."""

    def unpack(prefix: Path) -> Path:
        for path in prefix.parent.glob(f"{prefix.name}_*"):
            target = tmp_path / path.name.removesuffix(".gz")
            opened = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
            with opened as source:
                target.write_bytes(source.read())
        return tmp_path / prefix.name

    return unpack


# nsys stats parsing


def test_parse_kernel_table():
    rows = parse_stats_csv(stats_csv_path(ALL_ON, "cuda_gpu_kern_sum").read_text())
    assert len(rows) == 30
    assert rows[0] == {
        "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
        "total_ms": pytest.approx(83.865736),
        "count": 792,
        "avg_ms": pytest.approx(0.1058911),
        "min_ms": pytest.approx(0.087744),
        "max_ms": pytest.approx(0.386812),
    }
    # a quoted name with commas inside stays whole
    assert rows[7]["name"].startswith("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, ")
    assert rows[7]["name"].endswith("const T6 *, const T6 *, const T6 *)")
    assert rows[7]["count"] == 768


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


def test_summary_of_an_eager_launch_bound_decode(tables):
    summary = load_stats(tables(ALL_OFF))
    steps = summary["steps"]
    assert steps["count"] == 10
    assert steps["total_ms"] == pytest.approx(161.136148)
    assert steps["avg_ms"] == pytest.approx(16.1136148)
    assert (steps["min_ms"], steps["max_ms"]) == (pytest.approx(14.571842), pytest.approx(20.165953))

    # the CUB scan's CCCL range is another domain: left out
    phases = {row["name"]: row for row in summary["phases"]}
    assert list(phases) == ["prepare", "forward", "output", "schedule", "sample"]
    assert phases["prepare"]["total_ms"] == pytest.approx(154.282208)
    assert phases["prepare"]["count"] == 10
    assert phases["prepare"]["share"] == pytest.approx(154.282208 / 161.136148)
    assert phases["sample"]["avg_ms"] == pytest.approx(0.0249681)

    kernels = summary["kernels"]
    assert kernels["total_ms"] == pytest.approx(84.594315)
    assert kernels["count"] == 3400
    assert len(kernels["top"]) == 15
    assert kernels["top"][0]["share"] == pytest.approx(33.421634 / 84.594315)
    assert kernels["top"][1]["name"] == "_decode_kernel"

    api = summary["cuda_api"]
    assert api["top"][0]["name"] == "cuLaunchKernelEx"
    assert api["count"] == 6411
    assert api["total_ms"] == pytest.approx(22.612505)

    # eager launches keep the GPU waiting: kernels cover 51% of its timeline (3,400 kernels over
    # 162.77 ms from the first one's start to the last one's end, 83.69 ms of it covered)
    assert summary["kernel_busy_fraction"] == pytest.approx(83.694611 / 162.769523)
    idle = summary["gpu_idle"]
    assert idle["total_ms"] == pytest.approx(162.769523 - 83.694611)
    assert idle["per_step_ms"] == pytest.approx((162.769523 - 83.694611) / 10)
    assert idle["share"] == pytest.approx((162.769523 - 83.694611) / 162.769523)


def test_summary_of_a_graph_replayed_multi_step_decode(tables):
    summary = load_stats(tables(ALL_ON))
    assert summary["steps"]["count"] == 3 and summary["steps"]["total_ms"] == pytest.approx(146.910027)
    phases = {row["name"]: row for row in summary["phases"]}
    assert phases["sample"]["total_ms"] == pytest.approx(91.243487)  # the host waiting on the GPU
    assert phases["forward"]["count"] == 24  # 8 forwards per step
    assert summary["cuda_api"]["top"][0]["name"] == "cudaEventSynchronize"
    # summed kernel time exceeds the GPU's timeline: dependent launches overlap kernels...
    assert summary["kernels"]["total_ms"] == pytest.approx(219.531198)
    # ...which the timeline counts once: 98% busy over 219.71 ms
    assert summary["kernel_busy_fraction"] == pytest.approx(215.714431 / 219.710076)
    assert summary["gpu_idle"]["total_ms"] == pytest.approx(219.710076 - 215.714431)
    assert summary["gpu_idle"]["per_step_ms"] == pytest.approx((219.710076 - 215.714431) / 3)


def rounded(value):
    """Floats to 12 significant digits, through lists and dicts: sums taken in another order (the
    GPU machine's Python) differ in the last bits."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return [rounded(item) for item in value] if isinstance(value, list) else value


@pytest.mark.parametrize("prefix, name", [(ALL_OFF, "profile_all_off"), (ALL_ON, "profile_all_on")])
def test_summary_matches_the_committed_h200_profile(tables, prefix, name):
    """Every figure the profile of the H200 run holds comes out of its tables the same (those files
    predate the kernel kinds, which the test below checks on the same tables)."""
    committed = json.loads((DATA / "nsys" / f"{name}.json").read_text())
    summary = load_stats(tables(prefix))
    del summary["kernels"]["kinds"]
    assert rounded({key: committed[key] for key in summary}) == rounded(summary)


def test_kernel_time_by_kind_of_a_graph_replayed_decode(tables):
    kernels = load_stats(tables(ALL_ON))["kernels"]
    kinds = {row["kind"]: row for row in kernels["kinds"]}
    # every kernel counted once, in one kind
    assert sum(row["total_ms"] for row in kinds.values()) == pytest.approx(kernels["total_ms"])
    assert sum(row["count"] for row in kinds.values()) == kernels["count"]
    # 24 forwards of 32 layers: four cuBLAS GEMMs a layer, the QKV one split-K (its reduce is GEMM
    # time too), plus the LM head of each forward
    assert kinds["gemm"]["count"] == 24 * 32 * 5 + 24
    assert kinds["attention"]["count"] == 24 * 32  # one decode kernel a layer, no partition merge
    assert kinds["norm"]["count"] == 24 * (2 * 32 + 1)
    assert kinds["activation"]["count"] == kinds["rope + kv write"]["count"] == 24 * 32
    assert kinds["gemm"]["total_ms"] == pytest.approx(83.87 + 35.13 + 17.81 + 13.12 + 3.87, abs=0.01)
    assert kernels["kinds"][0]["kind"] == "gemm" and kernels["kinds"][1]["kind"] == "attention"
    assert 0.98 < sum(row["share"] for row in kernels["kinds"]) < 1.02


@pytest.mark.parametrize(
    "name, kind",
    [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "gemm"),
        ("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float>", "gemm"),
        ("_gemv_kernel", "gemm"),
        ("_merge_partitions_kernel", "attention"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128", "attention"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
        ("_rope_write_kv_kernel", "rope + kv write"),
        ("_pick_chunk_kernel", "sampling"),
        ("void at::native::<unnamed>::indexSelectSmallIndex<c10::BFloat16, int>", "embedding + copies"),
        ("void at::native::vectorized_elementwise_kernel<(int)4, CUDAFunctorOnSelf_add<int>>", "other"),
    ],
)
def test_kernel_kind_by_name(name, kind):
    assert kernel_kind(name) == kind


def test_summary_keeps_only_the_llmbench_domain():
    nvtx = [
        {"name": "llmbench:step", "total_ms": 10.0, "count": 1},
        {"name": "llmbench:forward", "total_ms": 4.0, "count": 1, "avg_ms": 4.0},
        {"name": "NCCL:ncclAllReduce", "total_ms": 3.0, "count": 2, "avg_ms": 1.5},
        {"name": ":warmup", "total_ms": 50.0, "count": 1, "avg_ms": 50.0},
    ]
    summary = summarize(nvtx, kernels=[], cuda_api=[], trace=[])
    assert [row["name"] for row in summary["phases"]] == ["forward"]
    assert summary["steps"]["total_ms"] == 10.0
    # no kernels captured: nothing to compare against
    assert summary["gpu_idle"] is None and summary["kernel_busy_fraction"] is None


def test_missing_tables_count_as_empty(tmp_path):
    summary = load_stats(tmp_path / "nsys")
    assert summary["steps"]["count"] == 0 and summary["kernels"]["top"] == []


def test_report_section_renders_the_summary(tables):
    html = profile_section_html({"tool": "nsys", "step_range": "300:310", **load_stats(tables(ALL_OFF))})
    assert "Profile (nsys, steps 300:310)" in html
    assert "<td>154.282</td>" in html  # prepare phase total
    assert "_decode_kernel" in html
    assert "Kernel busy (nsys): 51.4%" in html
    assert "GPU idle: 79.07 ms, 7.907 ms per step, 48.6% of that timeline" in html


# the kernel timeline (cuda_gpu_trace)

TRACE_CSV = """Generating SQLite file report.sqlite from report.nsys-rep
Processing [report.sqlite] with [/opt/nsys/reports/cuda_gpu_trace.py]...
"Start (ns)","Duration (ns)","CorrId","GrdX","Strm","Name"
"1000","500","1","132","7","_gemv_kernel"
"1400","300","2","132","7","_rms_norm_kernel"
"1800","200","3","1","7","[CUDA memcpy Device-to-Host]"
"2500","1000","4","64","7","nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT"
"3000","100","5","8","9","_argmax_kernel"
"""


def test_parse_trace_keeps_kernels_in_ms_and_drops_copies():
    assert parse_trace_csv(TRACE_CSV) == [
        pytest.approx((1e-3, 1.5e-3)),
        pytest.approx((1.4e-3, 1.7e-3)),
        pytest.approx((2.5e-3, 3.5e-3)),
        pytest.approx((3.0e-3, 3.1e-3)),
    ]
    assert parse_trace_csv("SKIPPED: report.sqlite does not contain CUDA kernel data.") == []


def test_timeline_counts_overlapping_kernels_once():
    # 1.0-1.7 (a dependent launch overlapping its predecessor), idle 1.7-2.5, 2.5-3.5 (two streams)
    timeline = kernel_timeline(parse_trace_csv(TRACE_CSV))
    assert timeline["span_ms"] == pytest.approx(2.5e-3)
    assert timeline["busy_ms"] == pytest.approx(1.7e-3)
    assert kernel_timeline([]) is None
    assert kernel_timeline([(5.0, 6.0), (0.0, 1.0), (0.5, 0.75)]) == {"span_ms": 6.0, "busy_ms": 2.0}


def test_summary_busy_fraction_comes_from_the_timeline():
    nvtx = [{"name": "llmbench:step", "total_ms": 4.0, "count": 2, "avg_ms": 2.0}]
    kernels = [{"name": "k", "total_ms": 5.0, "count": 3}]  # summed durations: overlap counted twice
    summary = summarize(nvtx, kernels, cuda_api=[], trace=[(0.0, 2.0), (1.0, 3.0), (3.5, 4.0)])
    assert summary["kernel_busy_fraction"] == pytest.approx(3.5 / 4.0)
    assert summary["gpu_idle"] == {"total_ms": 0.5, "per_step_ms": 0.25, "share": 0.125}
