"""The client's overhead budget as an HTTP run records it: per request the HTTP phases in requests.jsonl,
summary.json's client block with real lags, and client_limited as the lag bound decides it (flagged at the
top of the report)."""

from __future__ import annotations

import math
import time

import pytest

from llmbench.config.load import parse_config
from llmbench.mock_server import MockServer, MockSettings
from llmbench.report import write_report
from llmbench.results.records import HTTP_PHASE_COLUMNS, load_requests
from llmbench.run.runner import run_benchmark

RUN = {
    "name": "budget",
    "model": {"preset": "tiny"},
    "workload": {
        "num_requests": 16,
        "warmup_requests": 2,
        "max_concurrency": 4,
        "input": {"dist": "fixed", "mean": 8},
        "output": {"dist": "fixed", "mean": 8},
    },
    "telemetry": {"server_metrics": False},
    "output": {"report": False},
}


def run(mock, out, *overrides: str) -> dict:
    config = parse_config(RUN, ["backend.type=openai", f"backend.url={mock.url}", *overrides])
    return run_benchmark(config, out).summary.to_dict()["client"]


def real_spread(spread: dict) -> bool:
    p50, p99, top = spread["p50"], spread["p99"], spread["max"]
    return all(math.isfinite(v) and v >= 0 for v in (p50, p99, top)) and p50 <= p99 <= top


@pytest.mark.parametrize("workers", [1, 2])
def test_http_phases_are_columns_in_order(tmp_path, workers):
    with MockServer(MockSettings(ttft_ms=2, itl_ms=1, output_tokens=8)) as mock:
        run(mock, tmp_path, f"backend.workers={workers}")
    rows = load_requests(tmp_path)
    assert len(rows) == 18
    for r in rows:
        phases = [getattr(r, column) for column in HTTP_PHASE_COLUMNS]
        assert None not in phases, r
        send_start, connect, sent, headers, first_byte = phases
        assert r.submit_time <= send_start <= connect <= sent <= headers <= first_byte <= r.first_token_time
    assert '"headers_time":' in (tmp_path / "requests.jsonl").read_text().splitlines()[0]


def test_a_zero_bound_marks_the_run_client_limited_and_the_report_flags_it(tmp_path):
    # whether a loaded host is past a real bound is up to the host: a bound of 0 ms is passed by any
    # lag, a bound of 1000 s by none, so each verdict is certain
    with MockServer(MockSettings(ttft_ms=2, itl_ms=1, output_tokens=8)) as mock:
        limited = run(mock, tmp_path / "tight", "backend.client_lag_bound_ms=0")
        relaxed = run(mock, tmp_path / "loose", "backend.client_lag_bound_ms=1000000")
    assert limited["client_limited"] is True
    assert "backend.client_lag_bound_ms" in limited["reason"]
    assert relaxed["client_limited"] is False and "within 1e+06 ms" in relaxed["reason"]
    for block in (limited, relaxed):
        assert block["schedule_lag_ms"]["count"] == 16  # the timed requests, not the warm-up's
        assert real_spread(block["schedule_lag_ms"]) and real_spread(block["loop_lag_ms"])
        (worker,) = block["workers"]
        assert worker["busy_s"] > 0 and 0 <= worker["cpu_fraction"] and worker["max_in_flight"] <= 4
        assert block["max_in_flight"] <= block["configured_concurrency"] == 4
        assert block["max_output_tokens_per_s"] > 0 and 1 <= block["max_concurrent_requests"] <= 16
    report = write_report([tmp_path / "tight", tmp_path / "loose"], tmp_path / "report").read_text()
    head = report[report.index("<h1>") : report.index('<table class="header-table">')]  # the page's top
    assert head.count("CLIENT-LIMITED") == 1 and "budget (tight): schedule lag p99" in head


def test_each_worker_process_reports_its_loop(tmp_path):
    with MockServer(MockSettings(ttft_ms=2, itl_ms=1, output_tokens=8)) as mock:
        block = run(mock, tmp_path, "backend.workers=2")
    assert len(block["workers"]) == 2
    assert all(w["busy_s"] > 0 and w["cpu_fraction"] >= 0 for w in block["workers"])
    assert sum(w["max_in_flight"] for w in block["workers"]) >= block["max_in_flight"] > 0


def test_an_in_process_run_has_peaks_but_no_client_loop(tmp_path, null_config_file):
    from llmbench.config.load import load_config

    block = run_benchmark(load_config(null_config_file, []), tmp_path).summary.to_dict()["client"]
    assert block["workers"] is None and block["schedule_lag_ms"] is None
    assert block["client_limited"] is False and block["max_output_tokens_per_s"] > 0


def test_the_runners_own_delay_shows_in_the_schedule_lag_with_worker_processes(tmp_path, monkeypatch):
    """A runner that falls behind (here: 200 ms in every submit) is late against the closed loop's
    schedule. The worker processes (a slot each of max_concurrency 2) start a request the moment it
    comes if its slot is free, counting it from when the slot opened: the delay is schedule lag, not
    hidden in a later submit time. A one-token stream ends long before the next submit comes."""
    from llmbench.run import phase

    submit = phase._submit

    def slow_submit(*args):
        time.sleep(0.2)
        return submit(*args)

    monkeypatch.setattr(phase, "_submit", slow_submit)
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=1)) as mock:
        client = run(
            mock,
            tmp_path,
            "backend.workers=2",
            "workload.max_concurrency=2",
            "workload.num_requests=6",
            "workload.warmup_requests=0",
        )
    assert client["schedule_lag_ms"]["max"] >= 100
