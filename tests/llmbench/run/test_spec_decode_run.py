"""A run against the mock serving vLLM's speculative-decoding counters at GET /metrics: the summary, the
run's table and the report hold the acceptance the mock's known drafts imply, through real HTTP."""

from __future__ import annotations

import pytest
from rich.console import Console

from llmbench.cli.console import metrics_table
from llmbench.config.load import parse_config
from llmbench.mock_server import MockServer, MockSettings
from llmbench.report import write_report
from llmbench.run.runner import run_benchmark

RUN = {
    "name": "spec",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 4, "warmup_requests": 2, "input": {"mean": 8}, "output": {"mean": 7}},
    "output": {"report": False},
}


def test_each_trials_drafts_and_acceptance_come_from_the_servers_counters(tmp_path):
    # 7 tokens a request in chunks of 3, 3 and 1: 3 drafts of 4 proposed tokens, 2 + 2 + 0 accepted
    settings = MockSettings(ttft_ms=1, itl_ms=2, output_tokens=7, tokens_per_chunk=3, spec_draft_tokens=4)
    with MockServer(settings) as mock:
        config = parse_config(RUN, ["backend.type=openai", f"backend.url={mock.url}"])
        result = run_benchmark(config, tmp_path / "run", repeat=2)
    server = result.summary.to_dict()["server_metrics"]
    # the warm-up's and the preflight's drafts fall outside the trials' scrapes
    assert server["spec_drafts_by_trial"] == [12, 12] and server["spec_drafts"] == 24
    assert (server["spec_draft_tokens"], server["spec_accepted_tokens"]) == (96, 32)
    assert server["spec_acceptance_rate_by_trial"] == pytest.approx([1 / 3, 1 / 3])
    assert server["spec_mean_accepted_length"] == pytest.approx(1 + 32 / 24)
    assert server["sources"]["spec_drafts"] == "vllm:spec_decode_num_drafts_total"
    console = Console(width=200, record=True)
    console.print(metrics_table(result.summary))
    assert "spec decode acceptance / mean accepted length / drafts" in console.export_text()
    page = write_report([tmp_path / "run"], tmp_path / "run").read_text()
    assert "<h2>Speculative decoding</h2>" in page and "33.3%" in page and "2.33" in page


def test_a_server_without_speculative_decoding_adds_no_spec_keys(tmp_path):
    with MockServer(MockSettings(ttft_ms=1, itl_ms=1, output_tokens=7)) as mock:  # /metrics: 404
        config = parse_config(RUN, ["backend.type=openai", f"backend.url={mock.url}"])
        result = run_benchmark(config, tmp_path / "run")
    assert not [key for key in result.summary.to_dict()["server_metrics"] if key.startswith("spec_")]
    assert "Speculative decoding" not in write_report([tmp_path / "run"], tmp_path / "run").read_text()
