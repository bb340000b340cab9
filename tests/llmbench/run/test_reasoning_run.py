"""A run against the mock with a reasoning phase: the rows and the summary hold what the mock's known
schedule implies (its reasoning count, where the answer begins, TTFO after TTFT), through real HTTP."""

from __future__ import annotations

import pytest

from llmbench.config.load import parse_config
from llmbench.metrics.requests import latency_samples
from llmbench.mock_server import MockServer, MockSettings
from llmbench.report import write_report
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark

RUN = {
    "name": "reasoning",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 4, "input": {"mean": 8}, "output": {"mean": 7}, "max_concurrency": 2},
    "output": {"report": False},
}
CHAT = ["backend.type=openai", "backend.endpoint=chat", "backend.prompt_format=text"]


def run(settings: MockSettings, out):
    with MockServer(settings) as mock:
        config = parse_config(RUN, [*CHAT, f"backend.url={mock.url}"])
        result = run_benchmark(config, out)
        sent = [r for r in mock.records() if r.tokens == 7]  # not the preflight's one token
    return result.summary.to_dict()["metrics"], load_requests(out), sent


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_token_a_chunk_the_answer_starts_after_the_reasoning(field, tmp_path):
    settings = MockSettings(ttft_ms=2, itl_ms=3, output_tokens=7, reasoning_tokens=3, reasoning_field=field)
    metrics, rows, sent = run(settings, tmp_path / "run")
    assert len(sent) == len(rows) == 4
    for row in rows:
        assert (row.output_len, row.reasoning_tokens, row.answer_start) == (7, 3, 3)
        assert row.first_token_time == row.token_times[0] < row.token_times[3]  # TTFT, then TTFO
    assert (metrics["total_reasoning_tokens"], metrics["total_answer_tokens"]) == (12, 16)
    assert metrics["requests_without_answer"] == 0 and metrics["total_output_tokens"] == 28
    # every event is an arrival however the client's reads grouped them: per request 3 reasoning
    # events (2 gaps) and 4 answer events (3 gaps), and the one gap between the phases in neither
    samples = latency_samples(rows)
    assert [len(samples[k]) for k in ("itl", "reasoning_itl", "answer_itl", "ttfo")] == [24, 8, 12, 4]
    assert metrics["mean_ttft_ms"] < metrics["mean_ttfo_ms"] < metrics["mean_e2el_ms"]
    for key in ("mean_reasoning_itl_ms", "mean_answer_itl_ms", "p99_ttfo_ms"):
        assert metrics[key] is not None
    page = write_report([tmp_path / "run"], tmp_path / "run").read_text()
    assert "TTFO (ms)" in page and "Answer ITL (ms)" in page and "Reasoning tokens" in page


def test_a_chunk_holding_the_end_of_thinking_is_the_answers_first_arrival(tmp_path):
    # two tokens a chunk: [r r] [r a] [a a] [a]; without token ids a chunk counts one token, and usage's
    # count of reasoning (3) and of output (7) are the server's
    settings = MockSettings(ttft_ms=2, itl_ms=3, output_tokens=7, tokens_per_chunk=2, reasoning_tokens=3)
    metrics, rows, _ = run(settings, tmp_path / "run")
    for row in rows:
        assert (row.output_len, row.reasoning_tokens, row.answer_start) == (7, 3, 1)
        assert len(set(row.token_times)) <= 4  # four events; usage's three more join the last
    assert (metrics["total_reasoning_tokens"], metrics["total_answer_tokens"]) == (12, 16)


def test_a_reasoning_phase_longer_than_the_output_never_answers(tmp_path):
    settings = MockSettings(ttft_ms=1, itl_ms=1, output_tokens=7, reasoning_tokens=50)
    metrics, rows, _ = run(settings, tmp_path / "run")
    assert all((r.reasoning_tokens, r.answer_start) == (7, None) for r in rows)
    assert metrics["requests_without_answer"] == 4 and metrics["mean_ttfo_ms"] is None
    assert metrics["total_answer_tokens"] == 0
