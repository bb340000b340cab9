"""`llmbench run --profile-server` (backend.profile_server): the server's profiler runs over the timed
trials. Against a real `llmbench serve` it writes a torch trace whose path the summary keeps; a server
that refuses (the mock has no such endpoint, ours one already profiling) leaves the run measured."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.config.schema import ConfigError
from llmbench.mock_server import MockServer, MockSettings
from llmbench.report import write_report
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark

RUN = {
    "name": "profiled",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 4, "warmup_requests": 1, "input": {"mean": 8}, "output": {"mean": 3}},
    "output": {"report": False},
}


def run_command(tmp_path, url: str) -> tuple[object, RunSummary]:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**RUN, "backend": {"type": "openai", "url": url}}))
    args = ["run", str(config), "--out", str(tmp_path / "run"), "--profile-server"]
    result = CliRunner().invoke(app, args)
    return result, RunSummary.load(tmp_path / "run")


def test_the_profile_server_flag_profiles_llmbench_serve_over_the_timed_trials(server, tmp_path):
    result, summary = run_command(tmp_path, server.url + "/v1")
    assert result.exit_code == 0, result.output
    profile = summary.server_profile
    assert (profile.started, profile.stopped, profile.url) == (True, True, server.url)
    # the console wraps a long path anywhere, mid-name too: compare with every space and break taken out
    said = f"server profile: torch profile written to {profile.trace}"
    assert "".join(said.split()) in "".join(result.output.split())
    trace = json.loads(open(profile.trace).read())
    assert any(event.get("name") == "aten::embedding" for event in trace["traceEvents"])
    assert summary.config["backend"]["profile_server"] is True and summary.metrics.completed == 4
    page = write_report([tmp_path / "run"], tmp_path / "run").read_text()
    assert f'Server profile</td><td class="text">torch profile written to {profile.trace}<' in page


def test_a_server_already_profiling_refuses_and_the_run_is_measured(server, tmp_path):
    assert httpx.post(server.url + "/start_profile").status_code == 200
    try:
        config = parse_config(
            RUN, ["backend.type=openai", f"backend.url={server.url}", "backend.profile_server=true"]
        )
        summary = run_benchmark(config, tmp_path).summary
    finally:
        assert httpx.post(server.url + "/stop_profile", timeout=120).status_code == 200
    assert (summary.server_profile.started, summary.server_profile.trace) == (False, None)
    assert "answered HTTP 409: the profiler is already running" in summary.server_profile.message
    assert summary.metrics.completed == 4 and summary.complete


def test_a_server_without_the_endpoint_is_said_so_and_the_run_completes(tmp_path):
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0)) as mock:
        result, summary = run_command(tmp_path, mock.url)
    assert result.exit_code == 0, result.output
    assert summary.server_profile.started is False and summary.metrics.completed == 4
    said = f"the server was not profiled: POST {mock.root}/start_profile answered HTTP 404 (vLLM serves it"
    assert summary.server_profile.message.startswith(said)
    assert "".join(said.split()) in "".join(result.output.split())  # wrapped anywhere, as above


def test_profiling_a_server_needs_an_http_backend():
    with pytest.raises(
        ConfigError, match=r"^backend\.profile_server: profiles a server: backend\.type openai"
    ):
        parse_config(RUN, ["backend.profile_server=true"])


def test_a_run_profiles_the_llmbench_serve_it_starts_in_its_split_core(tmp_path):
    settings = ["backend.type=server", "engine.process_split=true", "backend.profile_server=true"]
    config = parse_config(RUN, [*settings, f"serve.profile_dir={tmp_path / 'traces'}"])
    profile = run_benchmark(config, tmp_path / "run").summary.server_profile
    (trace,) = (tmp_path / "traces").iterdir()  # the server process wrote where the run's config said
    assert profile.stopped and profile.trace == str(trace)
    assert any(
        event.get("name") == "aten::embedding" for event in json.loads(trace.read_text())["traceEvents"]
    )
