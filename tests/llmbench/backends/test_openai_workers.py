"""backend.workers: worker processes streaming one schedule give the rows one process gives."""

from __future__ import annotations

import os
import signal

import pytest

from llmbench.backends.openai_workers import STREAMS_PER_WORKER, worker_count
from llmbench.config.load import parse_config
from llmbench.config.schema import ConfigError
from llmbench.mock_server import MockServer, MockSettings
from llmbench.run.runner import run_benchmark
from tests.llmbench.backends.worker_runs import RUN, config, finished_after_a_worker_dies, rows


def test_two_workers_give_the_rows_of_one(tmp_path):
    with MockServer(MockSettings(ttft_ms=1, itl_ms=1, output_tokens=16)) as mock:
        run_benchmark(config(mock.url), tmp_path / "one")
        run_benchmark(config(mock.url, "backend.workers=2"), tmp_path / "two")
        served = [r.tokens for r in mock.records()]
    one, two = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert len(one) == 24 and all(finish == "length" for *_, finish in one)
    assert two == one
    assert sorted(served) == sorted([1, 1] + [row[2] for row in one + two])  # 2 preflights, then the load


def test_a_worker_that_dies_fails_its_streams_alone():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=50, output_tokens=100)) as mock:
        finished = finished_after_a_worker_dies(
            mock.url, lambda backend: os.kill(backend._streams._workers[0].pid, signal.SIGKILL)
        )
    assert finished["a"].error == "client error: worker process 0 exited with code -9"
    assert all(finished[r].error is None and finished[r].finish_reason.value == "length" for r in "bc")


def test_auto_takes_one_worker_per_256_streams_and_leaves_the_runner_a_core(monkeypatch):
    workload = parse_config(RUN, ["workload.max_concurrency=600"]).workload
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert worker_count("auto", workload) == 3 == -(-600 // STREAMS_PER_WORKER)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert worker_count("auto", workload) == 1  # 2 cores: the runner's thread streams
    assert worker_count(4, workload) == 4


@pytest.mark.parametrize("value", ["0", "many", "257", "true"])
def test_a_bad_workers_value_names_the_key(value):
    with pytest.raises(ConfigError, match=r"^backend\.workers: expected an integer >= 1 and <= 256 or auto"):
        parse_config(RUN, [f"backend.workers={value}"])
