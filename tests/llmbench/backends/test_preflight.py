"""Preflight against the mock server: each setting the server cannot take stops the run with one line
naming it, and the mock counts only the test requests (one token each), none of the load."""

from __future__ import annotations

import socket

import pytest
import yaml
from typer.testing import CliRunner

from llmbench.backends.preflight import PreflightError, preflight
from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.mock_server import MockServer, MockSettings

RUN = {
    "name": "preflight",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 6, "input": {"mean": 5}, "output": {"mean": 4}},
    "output": {"report": False},
}
FAST = {"ttft_ms": 0, "itl_ms": 0, "output_tokens": 4}


def config(url: str, *overrides: str):
    return parse_config(RUN, ["backend.type=openai", f"backend.url={url}", *overrides])


def probes_only(mock: MockServer, statuses: list[int]) -> None:
    records = mock.records()
    assert [r.status for r in records] == statuses
    assert all(r.tokens <= 1 for r in records)  # test requests ask for one token; the load for four


def test_a_base_url_without_v1_is_found_with_it():
    with MockServer(MockSettings(**FAST)) as mock:
        assert preflight(config(mock.root)) == mock.root + "/v1"
        assert preflight(config(mock.root + "/v1/")) == mock.root + "/v1"
        probes_only(mock, [200, 200])


def test_a_wrong_base_url_names_backend_url():
    with MockServer(MockSettings(prefix="/api/v1", **FAST)) as mock:
        with pytest.raises(PreflightError, match=r"^backend\.url: no model list at .*HTTP 404"):
            preflight(config(mock.root))
        probes_only(mock, [])


def test_an_unknown_model_names_backend_model():
    with MockServer(MockSettings(**FAST)) as mock:
        with pytest.raises(
            PreflightError, match=r"^backend\.model: .* no model named 'other' \(it serves mock\)"
        ):
            preflight(config(mock.url, "backend.model=other"))
        probes_only(mock, [])


def test_refused_token_ids_name_backend_prompt_format():
    with MockServer(MockSettings(text_only=True, **FAST)) as mock:
        with pytest.raises(
            PreflightError, match=r"^backend\.prompt_format: the server refuses token-id prompts"
        ):
            preflight(config(mock.url))
        probes_only(mock, [400, 200])  # as configured, then with a text prompt
        preflight(config(mock.url, "backend.prompt_format=text"))  # the fix it names works


def test_refused_stream_options_name_backend_include_usage():
    with MockServer(MockSettings(no_stream_options=True, **FAST)) as mock:
        with pytest.raises(
            PreflightError, match=r"^backend\.include_usage: the server refuses stream_options"
        ):
            preflight(config(mock.url))
        probes_only(mock, [400, 400, 200])  # as configured, with text, without stream_options
        preflight(config(mock.url, "backend.include_usage=false"))


def test_refused_vllm_fields_name_workload_ignore_eos():
    # transformers serve answers HTTP 422 {"detail": "Unexpected fields in the request: {...}"}
    with MockServer(MockSettings(openai_fields_only=True, **FAST)) as mock:
        with pytest.raises(PreflightError) as caught:
            preflight(config(mock.url, "backend.prompt_format=text"))
        assert str(caught.value).startswith("workload.ignore_eos: the server refuses vLLM's ignore_eos")
        assert "HTTP 422: Unexpected fields in the request" in str(caught.value)
        assert "output lengths are then the server's choice" in str(caught.value)
        probes_only(mock, [422, 200])  # as configured, then without ignore_eos and min_tokens
        preflight(config(mock.url, "backend.prompt_format=text", "workload.ignore_eos=false"))


def test_nothing_listening_names_backend_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PreflightError, match=r"^backend\.url: cannot connect to http://127\.0\.0\.1"):
        preflight(config(f"http://127.0.0.1:{port}/v1"))


def test_the_cli_stops_with_one_line_and_exit_2_before_any_load(tmp_path):
    with MockServer(MockSettings(text_only=True, **FAST)) as mock:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(RUN | {"backend": {"type": "openai", "url": mock.root}}))
        result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
        probes_only(mock, [400, 200])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "backend.prompt_format: the server refuses token-id prompts" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_run_that_passes_sends_its_load_after_one_test_request(tmp_path):
    from llmbench.run.runner import run_benchmark

    with MockServer(MockSettings(**FAST)) as mock:
        result = run_benchmark(config(mock.root), tmp_path / "run")  # the URL without /v1, as GuideLLM's
        records = mock.records()
    assert result.summary.to_dict()["metrics"]["completed"] == 6
    assert [r.tokens for r in records] == [1] + [4] * 6
