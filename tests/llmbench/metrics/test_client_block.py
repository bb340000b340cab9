"""summary.json's client block from rows and loop figures: schedule lag on a known schedule, the
concurrency reached, vLLM's peaks, and the client_limited verdict."""

from __future__ import annotations

import pytest

from llmbench.metrics.client import client_summary, vllm_peaks
from llmbench.results.records import RequestRecord

IDLE_LOOP = [{"loop_lag_ms": None, "cpu_s": 0.1, "busy_s": 1.0, "cpu_fraction": 0.1, "max_in_flight": 4}]


def row(i: int, submit: float, lag: float, tokens: list[float], trial: int = 0) -> RequestRecord:
    return RequestRecord(
        id=str(i),
        trial=trial,
        warmup=False,
        prompt_len=8,
        output_len=len(tokens),
        submit_time=submit,
        first_token_time=tokens[0],
        token_times=tokens,
        finish_reason="length",
        finish_time=tokens[-1],
        send_start_time=submit + lag,
    )


def test_schedule_lag_is_send_start_minus_the_intended_time():
    # a request every 100 ms; the client began them 1, 2, ..., 100 ms late
    rows = [row(i, 0.1 * i, (i + 1) / 1000, [0.1 * i + 0.05]) for i in range(100)]
    warmup = row(100, 0.0, 5.0, [5.1])  # a warm-up's lag counts for nothing
    warmup.warmup = True
    lag = client_summary([*rows, warmup], IDLE_LOOP, 1000.0, None).schedule_lag_ms
    assert lag.count == 100
    assert lag.p50 == pytest.approx(50.5)
    assert lag.p99 == pytest.approx(99.01)
    assert lag.max == pytest.approx(100.0)


def test_the_lag_bound_and_a_cpu_bound_worker_decide_client_limited():
    rows = [row(i, 0.0, 0.002, [0.01, 0.02]) for i in range(10)]  # 2 ms late each
    limited = client_summary(rows, IDLE_LOOP, 1.0, 10)
    assert limited.client_limited is True
    assert "schedule lag p99 2.0 ms > 1 ms (backend.client_lag_bound_ms)" in limited.reason
    within = client_summary(rows, IDLE_LOOP, 3.0, 10)
    assert within.client_limited is False
    assert within.reason == "schedule lag p99 2.0 ms within 3 ms; busiest worker at 0.10 of a core"
    busy = [IDLE_LOOP[0], {**IDLE_LOOP[0], "cpu_s": 0.95, "cpu_fraction": 0.95}]
    cpu_bound = client_summary(rows, busy, 3.0, 10)
    assert cpu_bound.client_limited is True
    assert cpu_bound.reason == "worker 1 at 0.95 of a core (CPU-bound)"
    in_process = client_summary(rows, None, 0.0, 10)  # the bundled engine's runner has no client loop
    assert in_process.client_limited is False
    assert in_process.reason.startswith("in-process backend")


def test_concurrency_reached_counts_requests_between_send_and_end():
    ends = [1.0, 2.0, 3.0, 4.0]
    rows = [
        row(i, submit, lag, [end])
        for i, (submit, lag, end) in enumerate(zip([0, 0.5, 0.9, 2.5], [0, 0, 0.2, 0], ends, strict=True))
    ]
    block = client_summary(rows, IDLE_LOOP, 10.0, 4)
    assert (block.max_in_flight, block.configured_concurrency) == (2, 4)  # #2 starts at 1.1, #0 gone


def test_vllm_peaks_take_the_busiest_whole_second_of_each_trial():
    rows = [
        row(0, 0.0, 0.0, [0.2, 0.4, 1.1, 1.2, 1.3]),  # seconds 0 and 1
        row(1, 0.5, 0.0, [1.5, 1.6, 1.7]),  # second 1: 6 tokens, 2 requests active
        row(2, 10.0, 0.0, [10.5], trial=1),  # the next trial counts from its own first submit
    ]
    assert vllm_peaks(rows) == (6.0, 2)  # (max_output_tokens_per_s, max_concurrent_requests)
