"""backend.workers: worker processes streaming one schedule give the rows one process gives."""

from __future__ import annotations

import logging
import os
import signal

import pytest

import llmbench
from llmbench.backends.client_capacity import (
    HostCapacity,
    WorkerChoice,
    choose_workers,
    load_capacity,
    save_capacity,
)
from llmbench.backends.openai import OpenAIBackend
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


def test_auto_takes_more_workers_for_more_streams_by_the_hosts_figure(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))

    def auto(streams: int) -> WorkerChoice:
        return choose_workers("auto", parse_config(RUN, [f"workload.max_concurrency={streams}"]).workload)

    # no calibration: 100k chunks/s a worker assumed, a chunk a millisecond a stream
    assert auto(600).count == 6 and "no calibration of this host" in auto(600).reason
    save_capacity(HostCapacity(chunks_per_s=190_000.0, streams=256, lag_bound_ms=10.0, measured="2026-12-07"))
    assert [auto(n).count for n in (64, 190, 191, 512, 1024)] == [1, 1, 2, 3, 6]
    assert auto(1024).reason == (
        "6 stream workers for 1,024 streams "
        "(this host sustained 190k chunks/s per worker, calibrate 2026-12-07)"
    )
    assert auto(4000).count == 15  # the runner keeps a core
    assert auto(4000).reason.endswith("; 22 wanted, 16 cores)")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert auto(1024).count == 1  # 2 cores: the runner's thread streams
    chosen = choose_workers(4, parse_config(RUN).workload)
    assert chosen == WorkerChoice(4, "4 stream workers (backend.workers: 4)")
    capped = choose_workers(4, parse_config(RUN, ["workload.max_concurrency=2"]).workload)
    assert capped == WorkerChoice(
        2, "2 stream workers (backend.workers: 4, at most one a slot of workload.max_concurrency 2)"
    )


def test_the_run_logs_how_many_workers_it_took_and_why(caplog, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    save_capacity(HostCapacity(chunks_per_s=190_000.0, streams=256, lag_bound_ms=10.0, measured="2026-12-07"))
    with MockServer(MockSettings(ttft_ms=0, itl_ms=1, output_tokens=2)) as mock:
        backend = OpenAIBackend()
        with caplog.at_level(logging.INFO, logger="llmbench.backends.openai"):
            backend.start(config(mock.url))
        backend.close()
    expected = "client: 1 stream worker for 6 streams (this host sustained 190k chunks/s per worker, "
    assert expected + "calibrate 2026-12-07)" in caplog.messages


def test_a_figure_of_another_version_is_not_used(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    save_capacity(HostCapacity(chunks_per_s=1000.0, streams=1, lag_bound_ms=10.0, measured="2026-12-07"))
    assert load_capacity() is not None
    monkeypatch.setattr(llmbench, "__version__", "0.0.0-other")
    assert load_capacity() is None


def test_auto_is_the_default_and_an_in_process_backend_takes_it(tmp_path):
    assert parse_config(RUN).backend.workers == "auto"
    assert parse_config({}).backend.workers == "auto"  # the bundled engine's config is valid as it was
    with pytest.raises(ConfigError, match="backend.workers: stream workers send HTTP"):
        parse_config({}, ["backend.workers=2"])


@pytest.mark.parametrize("value", ["0", "many", "257", "true"])
def test_a_bad_workers_value_names_the_key(value):
    with pytest.raises(ConfigError, match=r"^backend\.workers: expected an integer >= 1 and <= 256 or auto"):
        parse_config(RUN, [f"backend.workers={value}"])
