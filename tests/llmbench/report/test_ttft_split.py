import pytest

from llmbench.report.sections.ttft_split import request_split, ttft_split
from llmbench.results.records import RequestRecord


def row(submit, first, server, reason="length", tokens=None):
    return RequestRecord(
        id="0",
        trial=0,
        warmup=False,
        prompt_len=8,
        submit_time=submit,
        first_token_time=first,
        token_times=tokens or [first],
        finish_reason=reason,
        server_timestamps=server,
    )


def test_the_parts_add_up_to_the_client_ttft():
    server = {"t_queued": 1.002, "t_scheduled": 1.01, "t_first_token": 1.03, "t_token_handed": [1.031, 1.05]}
    split = request_split(row(1.0, 1.034, server, tokens=[1.034, 1.052]))
    assert split["client_to_server"] == pytest.approx(2.0)
    assert split["queueing"] == pytest.approx(8.0)
    assert split["prefill"] == pytest.approx(20.0)
    assert split["frontend_stream"] == pytest.approx(4.0)
    assert split["handed_to_client"] == pytest.approx(2.5)  # (3 + 2) / 2 ms
    parts = [split[k] for k in ("client_to_server", "queueing", "prefill", "frontend_stream")]
    assert sum(parts) == pytest.approx((1.034 - 1.0) * 1000)


def test_only_succeeded_requests_with_server_times_are_joined():
    a = {"t_queued": 0.1, "t_scheduled": 0.2, "t_first_token": 0.3, "t_token_handed": [0.3]}
    b = {"t_queued": 1.1, "t_scheduled": 1.4, "t_first_token": 1.5, "t_token_handed": [1.5]}
    rows = [row(0.0, 0.4, a), row(1.0, 1.6, b), row(2.0, 2.1, None), row(3.0, 3.5, a, reason="error")]
    split = ttft_split(rows)
    assert split["count"] == 2
    queueing = split["parts"]["queueing"]
    assert queueing["mean_ms"] == pytest.approx(200.0) and queueing["median_ms"] == pytest.approx(200.0)
    # mean TTFT is 500 ms, of which queueing is 200
    assert queueing["share_of_ttft"] == pytest.approx(0.4)
    assert ttft_split([row(0.0, 0.1, None)]) is None
