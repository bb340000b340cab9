import math

import msgspec
import pytest

from llmbench.config.schema import SloConfig
from llmbench.metrics.requests import arrival_gaps, compute_metrics, median_over_trials
from llmbench.metrics.steps import summarize_steps
from llmbench.results.metrics import file_metrics
from llmbench.results.records import RequestRecord

PCTS = [50, 90, 99]


def record(id, submit, times, prompt_len=10, finish="length", warmup=False):
    return RequestRecord(
        id=id,
        trial=0,
        warmup=warmup,
        prompt_len=prompt_len,
        output_len=len(times),
        submit_time=submit,
        first_token_time=times[0] if times else None,
        token_times=times,
        finish_reason=finish,
    )


# A: 5 tokens, the middle three arrive as one chunk; B: a single token; C: failed; D: warm-up
A = record("a", 0.0, [0.1, 0.2, 0.2, 0.2, 0.5], prompt_len=10)
B = record("b", 1.0, [1.3], prompt_len=20)
C = record("c", 0.5, [], prompt_len=30, finish="error")
D = record("d", -5.0, [-4.0, -3.0], warmup=True)


def test_every_metric_on_hand_made_timestamps():
    m = compute_metrics([D, A, B, C], PCTS)
    assert (m.completed, m.failed) == (2, 1)
    assert m.duration_s == pytest.approx(1.3)  # first timed submit (0.0) to last completion (1.3)
    assert (m.total_input_tokens, m.total_output_tokens) == (30, 6)
    assert m.request_throughput == pytest.approx(2 / 1.3)
    assert m.output_throughput == pytest.approx(6 / 1.3)
    assert m.total_token_throughput == pytest.approx(36 / 1.3)
    assert m.request_goodput is None  # no SLO given
    # TTFT: 100 and 300 ms
    assert m.latencies.mean_ttft_ms == pytest.approx(200)
    assert m.latencies.median_ttft_ms == pytest.approx(200)
    assert m.latencies.std_ttft_ms == pytest.approx(100)
    assert (m.latencies.min_ttft_ms, m.latencies.max_ttft_ms) == pytest.approx((100, 300))
    assert m.latencies.percentiles["p90_ttft_ms"] == pytest.approx(280)
    assert m.latencies.percentiles["p99_ttft_ms"] == pytest.approx(298)
    # TPOT: only A, (500 - 100) / 4; the 1-token request is excluded
    for stat in ("mean", "median", "min", "max", "p50", "p99"):
        assert m.value(f"{stat}_tpot_ms") == pytest.approx(100)
    assert m.latencies.std_tpot_ms == pytest.approx(0)
    # ITL: A's chunk is one arrival, so gaps are 100 and 300 ms; B has none
    assert m.latencies.mean_itl_ms == pytest.approx(200)
    assert (m.latencies.min_itl_ms, m.latencies.max_itl_ms) == pytest.approx((100, 300))
    # E2EL: 500 and 300 ms
    assert m.latencies.mean_e2el_ms == pytest.approx(400)
    assert m.latencies.max_e2el_ms == pytest.approx(500)


def test_duration_runs_until_a_failure_that_finishes_last():
    # E times out at 2.0 s after one token; vLLM's duration ends when the last request returns
    E = record("e", 0.2, [0.4], finish="timeout")
    E.finish_time = 2.0
    m = compute_metrics([D, A, B, C, E], PCTS)
    assert (m.completed, m.failed) == (2, 2)
    assert m.duration_s == pytest.approx(2.0)
    assert m.output_throughput == pytest.approx(6 / 2.0)
    assert m.request_throughput == pytest.approx(2 / 2.0)
    assert m.latencies.max_e2el_ms == pytest.approx(500)  # its latencies stay out
    # every request failed: the run still lasted, and served nothing
    m = compute_metrics([C, E], PCTS)
    assert (m.duration_s, m.output_throughput) == (pytest.approx(1.8), 0.0)  # 0.2 to 2.0


def test_runner_records_when_each_request_ended(tmp_path):
    from llmbench.config.load import parse_config
    from llmbench.results.records import load_requests
    from llmbench.run.runner import run_benchmark
    from tests.llmbench.null_run import NULL_RUN

    # 300 tokens take longer than 5 ms: requests are aborted, and the run lasts until the last abort
    long_outputs = ["workload.output={dist: fixed, mean: 300}", "workload.request_timeout_s=0.005"]
    config = parse_config(NULL_RUN, long_outputs)
    result = run_benchmark(config, tmp_path)
    rows = [r for r in load_requests(tmp_path) if not r.warmup]
    timed_out = [r for r in rows if r.finish_reason == "timeout"]
    assert timed_out and all(r.finish_time >= r.submit_time + 0.005 for r in timed_out)
    span = max(r.finish_time for r in rows) - min(r.submit_time for r in rows)
    assert result.summary.to_dict()["metrics"]["duration_s"] == pytest.approx(span)
    config = parse_config(NULL_RUN)
    run_benchmark(config, tmp_path / "ok")
    assert all(r.finish_time == r.token_times[-1] for r in load_requests(tmp_path / "ok"))


def test_key_names_follow_vllm():
    m = compute_metrics([A, B], [50, 99.9])
    keys = "request_throughput output_throughput total_token_throughput mean_ttft_ms median_ttft_ms"
    keys += " p99.9_ttft_ms mean_tpot_ms mean_itl_ms p50_itl_ms mean_e2el_ms std_e2el_ms completed failed"
    assert set(keys.split()) <= set(file_metrics(msgspec.to_builtins(m)))


def test_goodput_counts_requests_meeting_every_slo():
    assert compute_metrics([A, B], PCTS, SloConfig(ttft_ms=200)).request_goodput == pytest.approx(1 / 1.3)
    # A's TPOT is 100 ms; B has one token, so no TPOT to miss
    assert compute_metrics([A, B], PCTS, SloConfig(tpot_ms=50)).request_goodput == pytest.approx(1 / 1.3)
    both = SloConfig(ttft_ms=200, tpot_ms=50)
    assert compute_metrics([A, B], PCTS, both).request_goodput == 0.0
    assert compute_metrics([A, B], PCTS, SloConfig(e2el_ms=1000)).request_goodput == pytest.approx(2 / 1.3)


def test_no_completed_requests_gives_zero_rates_and_no_latencies():
    m = compute_metrics([C], PCTS)
    assert (m.completed, m.failed, m.duration_s, m.output_throughput) == (0, 1, 0.0, 0.0)
    assert m.latencies.mean_ttft_ms is None and m.latencies.percentiles["p99_itl_ms"] is None


def test_chunks_count_as_one_gap():
    assert arrival_gaps([1.0, 1.0, 1.0]) == []
    assert arrival_gaps([0.0, 0.5, 0.5, 2.0]) == [0.5, 1.5]


def test_events_of_one_read_count_a_gap_each():
    # tokens 1-2 one event, token 3 a second event of the same read, tokens 4-5 one event of the next read
    assert arrival_gaps([0.0, 0.5, 0.5, 0.5, 2.0, 2.0], same_read_events=[3]) == [0.5, 0.0, 1.5]


def test_median_over_trials():
    trials = [
        {"completed": 10, "mean_ttft_ms": 1.0, "request_goodput": None},
        {"completed": 12, "mean_ttft_ms": 5.0, "request_goodput": None},
        {"completed": 11, "mean_ttft_ms": 2.0, "request_goodput": None},
    ]
    assert median_over_trials(trials) == {"completed": 11, "mean_ttft_ms": 2.0, "request_goodput": None}


def test_step_summary():
    rows = [
        {
            "t_start": 0.0,
            "t_end": 0.010,
            "schedule_ms": 1.0,
            "prepare_ms": 2.0,
            "sample_ms": 3.0,
            "output_ms": 1.0,
            "ipc_ms": 0.0,
            "gpu_ms": math.nan,
        },
        {
            "t_start": 0.010,
            "t_end": 0.030,
            "schedule_ms": 2.0,
            "prepare_ms": 2.0,
            "sample_ms": 1.0,
            "output_ms": 1.0,
            "ipc_ms": 1.0,
            "gpu_ms": 4.0,
        },
    ]
    s = summarize_steps(rows)
    assert s.num_steps == 2
    assert s.mean_step_ms == pytest.approx(15.0)
    assert s.mean_cpu_ms_per_step == pytest.approx(5.0)  # the sample phase is the wait, apart
    assert s.mean_wait_ms == pytest.approx(2.0)
    assert s.mean_gpu_ms == pytest.approx(4.0)
    assert summarize_steps([]).num_steps == 0


def test_median_over_trials_keeps_values_that_are_not_numbers():
    trials = [
        {"mean_cpu_ms_per_step": 0.2, "peaks_source": "default (H200)", "mbu": None},
        {"mean_cpu_ms_per_step": 0.4, "peaks_source": "default (H200)", "mbu": None},
    ]
    merged = median_over_trials(trials)
    assert merged == {
        "mean_cpu_ms_per_step": pytest.approx(0.3),
        "peaks_source": "default (H200)",
        "mbu": None,
    }
