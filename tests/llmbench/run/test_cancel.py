"""workload.cancel: the client hangs up on a seeded share of the requests; they are counted apart from
failures, and the server (a real `llmbench serve` on 127.0.0.1, a free port) goes on serving."""

from __future__ import annotations

import httpx
import pytest

from llmbench.config.load import parse_config
from llmbench.config.schema import ConfigError
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark
from tests.llmbench.null_run import NULL_RUN

RUN = {
    "name": "cancel",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 12, "input": {"mean": 8}, "output": {"mean": 40}, "max_concurrency": 4},
    "output": {"report": False},
}


def test_cancelled_streams_are_counted_apart_and_the_server_serves_on(server, tmp_path):
    overrides = ["backend.type=openai", f"backend.url={server.url}/v1"]
    overrides += ["workload.cancel.rate=0.5", "workload.cancel.after_tokens=3"]
    result = run_benchmark(parse_config(RUN, overrides), tmp_path / "run")
    rows = load_requests(tmp_path / "run")
    cancelled = [r for r in rows if r.finish_reason == "cancelled"]
    metrics = result.summary.to_dict()["metrics"]
    assert 0 < len(cancelled) < 12 and metrics["cancelled"] == len(cancelled)
    assert metrics["failed"] == 0 and metrics["completed"] == 12 - len(cancelled)
    assert all(3 <= r.output_len < 40 and r.error is None for r in cancelled)
    # the same seed cancels the same requests
    again = run_benchmark(parse_config(RUN, overrides), tmp_path / "again")
    assert {r.id for r in load_requests(tmp_path / "again") if r.finish_reason == "cancelled"} == {
        r.id for r in cancelled
    }
    assert again.summary.to_dict()["metrics"]["cancelled"] == len(cancelled)
    # every hung-up stream left the engine, and the server still answers
    assert server.check_empty() is None
    response = httpx.post(server.url + "/v1/completions", json={"prompt": [5, 6], "max_tokens": 2})
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 2


def test_cancelling_after_seconds_in_process_leaves_the_engine_empty(tmp_path):
    overrides = ["workload.output={dist: fixed, mean: 1900}"]
    overrides += ["workload.cancel.rate=1", "workload.cancel.after_s=0.05", "workload.num_requests=4"]
    result = run_benchmark(parse_config(NULL_RUN, overrides), tmp_path, check=True)  # check: nothing leaked
    metrics = result.summary.to_dict()["metrics"]
    assert (metrics["cancelled"], metrics["failed"], metrics["completed"]) == (4, 0, 0)
    assert all(0 < r.output_len < 1900 for r in load_requests(tmp_path) if not r.warmup)


@pytest.mark.parametrize(
    "cancel",
    [
        ["workload.cancel.rate=0.2"],
        ["workload.cancel.rate=0.2", "workload.cancel.after_s=1", "workload.cancel.after_tokens=2"],
    ],
)
def test_a_cancel_rate_needs_exactly_one_moment(cancel):
    with pytest.raises(
        ConfigError, match=r"^workload\.cancel\.after_tokens: a cancelled request needs exactly one"
    ):
        parse_config(RUN, cancel)
