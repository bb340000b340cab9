"""A reasoning model's figures from known rows: TTFO, each phase's gaps and the token split."""

import msgspec
import pytest

from llmbench.metrics.requests import compute_metrics
from llmbench.results.metrics import file_metrics
from llmbench.results.records import RequestRecord


def row(rid: str, times: list[float], reasoning: int | None, answer: int | None, **extra) -> RequestRecord:
    return RequestRecord(
        rid,
        trial=0,
        warmup=False,
        prompt_len=4,
        output_len=len(times),
        submit_time=0.0,
        first_token_time=times[0],
        token_times=times,
        finish_reason="length",
        finish_time=times[-1],
        reasoning_tokens=reasoning,
        answer_start=answer,
        **extra,
    )


def test_ttfo_and_the_gaps_of_each_phase():
    records = [
        # reasoning arrives at 0.1, 0.2, 0.3 (the last read holding two events), the answer at 0.5, 0.6
        row("a", [0.1, 0.2, 0.3, 0.3, 0.5, 0.6], reasoning=4, answer=4, same_read_events=[3]),
        row("b", [0.2, 0.4], reasoning=None, answer=None),  # no reasoning: its answer is all of it
        row("c", [0.1, 0.3, 0.4], reasoning=3, answer=None),  # cut off while thinking
    ]
    m = compute_metrics(records, percentiles=[50])
    assert m.latencies.mean_ttft_ms == pytest.approx(400 / 3)  # the first token of either kind
    assert m.latencies.mean_ttfo_ms == pytest.approx(350)  # a: 500, b: 200; c never answered
    # a's reasoning gaps 100, 100, 0 (two events of one read), c's 200, 100
    assert m.latencies.mean_reasoning_itl_ms == pytest.approx(500 / 5)
    assert m.latencies.mean_answer_itl_ms == pytest.approx(150)  # a: 100; b: 200
    assert m.latencies.mean_itl_ms == pytest.approx(1000 / 8)  # every gap, the 300 -> 500 one included
    assert m.latencies.percentiles["p50_ttfo_ms"] == pytest.approx(350)
    assert (m.total_reasoning_tokens, m.total_answer_tokens) == (7, 4)
    assert m.requests_without_answer == 1 and m.total_output_tokens == 11


def test_a_run_without_reasoning_has_none_of_these_keys():
    m = compute_metrics([row("b", [0.2, 0.4], reasoning=None, answer=None)], percentiles=[99])
    keys = file_metrics(msgspec.to_builtins(m))
    assert not [key for key in keys if "ttfo" in key or "reasoning" in key or "answer" in key]
