"""backend.ray_address: the stream workers as Ray actors give the rows the worker processes give, on a local
Ray cluster on 127.0.0.1; without Ray the setting is one line naming the extra, and exit 2."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from typer.testing import CliRunner

from llmbench.backends.openai_ray import reach_cluster
from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.config.schema import ConfigError
from llmbench.mock_server import MockServer, MockSettings
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark
from tests.llmbench.backends.worker_runs import RUN, config, finished_after_a_worker_dies, rows

REPO = Path(__file__).parents[3]


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'llmbench[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_two_ray_workers_give_the_rows_of_two_processes(ray_cluster, tmp_path):
    with MockServer(MockSettings(ttft_ms=1, itl_ms=1, output_tokens=16)) as mock:
        run_benchmark(config(mock.url, "backend.workers=2"), tmp_path / "processes")
        run_benchmark(config(mock.url, "backend.workers=2", "backend.ray_address=auto"), tmp_path / "ray")
        served = [r.tokens for r in mock.records()]
    processes, ray = rows(tmp_path / "processes"), rows(tmp_path / "ray")
    assert len(processes) == 24 and all(finish == "length" for *_, finish in processes)
    assert ray == processes  # count, submit order, token counts
    assert sorted(served) == sorted([1, 1] + [row[2] for row in processes + ray])  # 2 preflights, the load
    # the actors' stamps reach the runner's clock: each token after its request's submit, in order
    for record in load_requests(tmp_path / "ray"):
        assert record.submit_time < record.first_token_time <= record.token_times[-1] <= record.finish_time


def test_a_ray_worker_that_dies_fails_its_streams_alone(ray_cluster):
    with MockServer(MockSettings(ttft_ms=0, itl_ms=50, output_tokens=100)) as mock:
        finished = finished_after_a_worker_dies(
            mock.url,
            lambda backend: ray_cluster.kill(backend._streams._actors[0]),
            "backend.ray_address=auto",
        )
    # Ray's own words follow (the actor was killed)
    assert finished["a"].error.startswith("client error: Ray worker 0 failed: The actor")
    assert all(finished[r].error is None and finished[r].finish_reason.value == "length" for r in "bc")


def test_without_ray_the_setting_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    config_file = tmp_path / "run.yaml"
    config_file.write_text("model: {preset: tiny}\nworkload: {num_requests: 2}\n")
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=4)) as mock:
        overrides = ["backend.type=openai", f"backend.url={mock.url}", "backend.ray_address=local"]
        sets = [arg for item in overrides for arg in ("--set", item)]
        result = CliRunner().invoke(app, ["run", str(config_file), "--out", str(tmp_path / "out"), *sets])
        load = [r for r in mock.records() if r.tokens != 1]
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: run.yaml: backend.ray_address: Ray is not installed: pip install 'llmbench[ray]'"
    )
    assert not load  # the preflight's one-token request only


def test_a_run_started_apart_joins_the_running_cluster_with_auto(ray_cluster, tmp_path):
    # as `ray start` and then `llmbench run` on a host of the cluster: the run is a process of its own
    config_file = tmp_path / "run.yaml"
    config_file.write_text("model: {preset: tiny}\nworkload: {num_requests: 4}\noutput: {report: false}\n")
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=4)) as mock:
        overrides = ["backend.type=openai", f"backend.url={mock.url}", "backend.ray_address=auto"]
        command = [sys.executable, "-m", "llmbench", "run", str(config_file), "--out", str(tmp_path / "out")]
        command += [arg for item in overrides for arg in ("--set", item)]
        # `auto` reads RAY_ADDRESS first: this test's cluster, where another test process has one too
        env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
        run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Ray workers: 1, over a cluster of 2 CPUs" in run.stdout + run.stderr  # this test's cluster
    assert [r.output_len for r in load_requests(tmp_path / "out")] == [4] * 4


def test_an_address_with_no_cluster_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'llmbench[ray]'")
    config_file = tmp_path / "run.yaml"
    config_file.write_text("model: {preset: tiny}\nworkload: {num_requests: 2}\n")
    # a port bound and not listening: nothing there answers, and nothing else takes it meanwhile
    with socket.socket() as closed, MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=4)) as mock:
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        overrides = ["backend.type=openai", f"backend.url={mock.url}", f"backend.ray_address={address}"]
        command = [sys.executable, "-m", "llmbench", "run", str(config_file), "--out", str(tmp_path / "out")]
        command += [arg for item in overrides for arg in ("--set", item)]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        # ray.init alone retried such an address for as long as it ran
        run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: run.yaml: backend.ray_address {address}: no Ray cluster reached at {address}: "
        "Connection refused"
    )
    assert "Traceback" not in run.stderr


def test_an_address_that_never_answers_is_given_up_at_the_connect_timeout():
    # a listener whose queue is full drops a new connection's SYN: the connect waits for an answer
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        address = f"127.0.0.1:{full.getsockname()[1]}"
        queued = []
        try:
            for _ in range(
                16
            ):  # fill the queue (a backlog of 0 still holds one) until a connect gets nothing
                try:
                    queued.append(socket.create_connection(full.getsockname(), timeout=0.2))
                except TimeoutError:
                    break
            with pytest.raises(ValueError) as error:
                reach_cluster(address, 0.2)
        finally:
            for connection in queued:
                connection.close()
    assert str(error.value) == (
        f"backend.ray_address {address}: no Ray cluster reached at {address}: no answer within 0.2 s "
        "(backend.ray_connect_timeout_s)"
    )


def test_a_ray_client_address_without_ray_client_names_the_install(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "grpc", None
    )  # `import grpc` fails as where ray[client] is not installed
    with pytest.raises(ValueError) as error:
        reach_cluster("ray://127.0.0.1:1", 1.0)
    assert str(error.value) == (
        "backend.ray_address ray://127.0.0.1:1: Ray Client needs ray[client]: pip install 'llmbench[ray]'"
    )


def test_the_ray_extra_brings_ray_client_for_a_ray_address():
    # the extra's one line in pyproject.toml (tomllib is Python 3.11's, and 3.10 is supported)
    (listed,) = re.findall(r"^ray = \[(.*)\]$", (REPO / "pyproject.toml").read_text(), re.M)
    (ray,) = [
        Requirement(item.strip(' "')) for item in listed.split(",") if item.strip(' "').startswith("ray")
    ]
    assert "client" in ray.extras


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["backend.type=openai", "backend.url=http://127.0.0.1:1", "backend.ray_address=ray:/host"],
            "expected auto, local, ray://host:port or host:port, got 'ray:/host'",
        ),
        (["backend.ray_address=auto"], "Ray workers stream HTTP: backend.type openai or server"),
    ],
)
def test_a_bad_ray_address_names_the_key(overrides, message):
    with pytest.raises(ConfigError) as error:
        parse_config(RUN, overrides)
    assert str(error.value) == f"backend.ray_address: {message}"
