import math

import pytest

from llmbench.metrics.steps import (
    StepCosts,
    derived_columns,
    gpu_busy_step_spans,
    idle_gaps,
    merge_intervals,
    summarize_steps,
)
from llmbench.results.steps import Steps
from tests.llmbench.metrics.tiny_counts import TINY_KV_BYTES_PER_TOKEN, TINY_MATMUL_PARAMS, TINY_PARAM_BYTES

MS = 1e-3

# the tiny preset at 1 GB/s and 1 GFLOP/s, so utilizations are plain ratios of its counts (tiny_counts.py)
TINY = {
    "model": {"preset": "tiny", "dtype": "bfloat16"},
    "hardware": {"peak_bandwidth_gb_s": 1, "peak_tflops": 1e-3},
}


def step(i, t_start, t_end, gpu=None, **fields):
    """A steps.csv row with times in ms; phases default to 0, GPU timing to NaN."""
    row = {
        "trial": 0,
        "step": i,
        "t_start": t_start * MS,
        "t_end": t_end * MS,
        "num_prefill_tokens": 0,
        "num_decode_seqs": 0,
        "num_running": 0,
        "num_steps": 1,
        "schedule_ms": 0.0,
        "prepare_ms": 0.0,
        "sample_ms": 0.0,
        "output_ms": 0.0,
        "ipc_ms": 0.0,
        "gpu_ms": math.nan,
        "gpu_start": math.nan,
        "gpu_end": math.nan,
    }
    if gpu is not None:
        row.update(gpu_start=gpu[0] * MS, gpu_end=gpu[1] * MS, gpu_ms=gpu[1] - gpu[0])
    row.update(fields)
    return row


def test_merge_intervals():
    assert merge_intervals([(5, 6), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 6)]
    assert merge_intervals([]) == []


def test_gpu_busy_is_the_union_of_intervals_over_wall_time():
    rows = [step(0, 0, 10, gpu=(2, 8)), step(1, 10, 20, gpu=(6, 12)), step(2, 20, 25, gpu=(15, 18))]
    # union [2, 12] + [15, 18] = 13 ms of 25
    assert gpu_busy_step_spans(rows) == pytest.approx(13 / 25)


def test_gpu_busy_counts_device_work_past_the_last_step_end():
    # overlapped steps: the last step returns at 20 while its kernels run until 24, and the first
    # step's start event fires before the host's t_start has been taken (clock anchoring): busy
    # [−1, 24] is the whole wall time, not 25/21 of it
    rows = [step(0, 0, 10, gpu=(-1, 11)), step(1, 10, 20, gpu=(11, 24))]
    assert gpu_busy_step_spans(rows) == pytest.approx(1.0)
    gaps = idle_gaps([step(0, 0, 10, gpu=(2, 8)), step(1, 10, 20, gpu=(12, 24))])
    assert [(g["start"], g["end"]) for g in gaps] == [(0, 2 * MS), (8 * MS, 12 * MS)]


def test_gpu_busy_counts_each_trial_span_alone():
    first = [step(0, 0, 10, gpu=(0, 5))]
    second = [{**step(0, 1000, 1010, gpu=(1000, 1010)), "trial": 1}]
    # 5 + 10 ms busy over 10 + 10 ms of trial spans; the second between trials is not idle time
    assert gpu_busy_step_spans(first + second) == pytest.approx(15 / 20)


def test_without_gpu_timing_gpu_figures_are_none_not_zero():
    rows = [step(0, 0, 10, schedule_ms=1.0, num_decode_seqs=2, num_running=2, num_context_tokens=50)]
    assert gpu_busy_step_spans(rows) is None
    assert idle_gaps(rows) == []
    s = summarize_steps(rows, TINY)
    assert s.gpu_busy_step_spans is None and s.gpu_idle_ms is None
    assert s.mean_gpu_ms is None and s.mbu is None and s.mfu is None
    columns = derived_columns(rows[0], StepCosts.from_run_config(TINY))
    assert columns["cpu_ms"] == 1.0 and math.isnan(columns["mbu"]) and math.isnan(columns["mfu"])


def test_idle_gaps_are_charged_to_the_overlapping_host_phases():
    rows = [
        # host: schedule [0, 2], prepare [2, 5], sample [5, 9], output [9, 10]; GPU [5, 9]
        step(0, 0, 10, gpu=(5, 9), schedule_ms=2.0, prepare_ms=3.0, sample_ms=4.0, output_ms=1.0),
        # between steps [10, 12]; schedule [12, 13], prepare [13, 15.5], sample [15.5, 19.5],
        # output [19.5, 20], the rest of the step [20, 21] untimed; GPU [15.5, 19]
        step(1, 12, 21, gpu=(15.5, 19), schedule_ms=1.0, prepare_ms=2.5, sample_ms=4.0, output_ms=0.5),
    ]
    gaps = idle_gaps(rows)
    assert [(g["start"] / MS, g["end"] / MS) for g in gaps] == [
        pytest.approx((0, 5)),
        pytest.approx((9, 15.5)),
        pytest.approx((19, 21)),
    ]
    assert gaps[0]["phase"] == "prepare"
    assert gaps[0]["by_phase"] == pytest.approx({"schedule": 2.0, "prepare": 3.0})
    assert gaps[1]["phase"] == "prepare"
    expected = {"output": 1.0, "between_steps": 2.0, "schedule": 1.0, "prepare": 2.5}
    assert gaps[1]["by_phase"] == pytest.approx(expected)
    assert gaps[2]["phase"] == "other"
    assert gaps[2]["by_phase"] == pytest.approx({"sample": 0.5, "output": 0.5, "other": 1.0})

    s = summarize_steps(rows)
    assert s.gpu_busy_step_spans == pytest.approx(7.5 / 21)
    assert s.gpu_idle_ms == pytest.approx(21 - 7.5)
    assert s.num_gpu_idle_gaps == 3 and s.max_gpu_idle_gap_ms == pytest.approx(6.5)
    assert s.gpu_idle_during_prepare_ms == pytest.approx(5.5)
    assert s.gpu_idle_during_between_steps_ms == pytest.approx(2.0)


def test_cpu_overhead_per_step_forward_and_sequence():
    # CPU overhead is schedule + prepare + output + ipc: 4 and 7 ms; the readback wait (sample) apart
    rows = [
        step(0, 0, 10, schedule_ms=1.0, prepare_ms=2.0, sample_ms=3.0, output_ms=1.0, num_running=4),
        step(1, 10, 30, schedule_ms=2.0, prepare_ms=2.0, sample_ms=1.0, output_ms=2.0, ipc_ms=1.0,
             num_steps=8, num_running=12),
    ]  # fmt: skip
    s = summarize_steps(rows)
    assert s.num_steps == 2 and s.num_forwards == 9
    assert s.mean_step_ms == pytest.approx(15.0)
    assert s.mean_cpu_ms_per_step == pytest.approx(5.5)
    assert s.mean_cpu_ms_per_forward == pytest.approx(11 / 9)
    assert s.mean_cpu_ms_per_seq == pytest.approx(11 / 16)
    assert s.mean_wait_ms == pytest.approx(2.0)
    assert s.mean_ipc_ms == pytest.approx(0.5) and s.mean_sample_ms == pytest.approx(2.0)
    assert [derived_columns(r, None)["cpu_ms"] for r in rows] == [4.0, 7.0]
    assert summarize_steps([]) == Steps(num_steps=0)


def test_mbu_and_mfu_of_a_decode_step():
    row = step(0, 0, 1, gpu=(0, 0.5), num_decode_seqs=4, num_running=4, num_context_tokens=400)
    costs = StepCosts.from_run_config(TINY)
    nbytes = TINY_PARAM_BYTES + 400 * TINY_KV_BYTES_PER_TOKEN
    # matmuls for 4 tokens, the LM head for 4 rows, attention (QK and PV, 2 layers x 64) over 400 positions
    flops = 2 * 4 * TINY_MATMUL_PARAMS + 2 * 4 * 512 * 64 + 4 * 2 * 64 * 400
    assert costs.step_bytes(row) == nbytes and costs.step_flops(row) == flops
    mbu, mfu = costs.utilization(row)
    assert mbu == pytest.approx(nbytes / 0.5e-3 / 1e9)
    assert mfu == pytest.approx(flops / 0.5e-3 / 1e9)
    s = summarize_steps([row], TINY)
    assert s.mbu == pytest.approx(mbu) and s.mfu == pytest.approx(mfu)
    assert s.peaks_source == "config" and s.peak_bandwidth_bytes_per_s == 1e9


def test_multi_step_reads_one_more_kv_position_per_sequence_each_forward():
    row = step(0, 0, 1, gpu=(0, 1), num_decode_seqs=4, num_steps=4, num_context_tokens=400)
    costs = StepCosts.from_run_config(TINY)
    kv_tokens = 4 * 400 + 4 * (0 + 1 + 2 + 3)
    assert costs.step_bytes(row) == 4 * TINY_PARAM_BYTES + kv_tokens * TINY_KV_BYTES_PER_TOKEN


def test_peaks_default_to_labeled_h200_figures():
    costs = StepCosts.from_run_config({"model": {"preset": "llama3-8b"}})
    assert (costs.peak_bandwidth, costs.peak_flops) == (4.2e12, 7.84e14)
    assert costs.peaks_source == "default (H200)"
    assert StepCosts.from_run_config({"model": {"path": "/no/such/model"}}) is None
    # a simulated device's step times (null_forward_ms) are no GPU's: no MBU or MFU against its peaks
    assert StepCosts.from_run_config({"model": {"preset": "llama3-8b", "executor": "null"}}) is None
