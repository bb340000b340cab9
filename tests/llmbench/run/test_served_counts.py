"""A run against a real `llmbench serve` (the tiny model on CPU, 127.0.0.1, a free port): what the
server's usage says about each prompt (its own token count, the tokens its prefix cache held) reaches
the request rows and the trial's metrics."""

from __future__ import annotations

import pytest

from llmbench.config.load import parse_config
from llmbench.run.records import load_requests
from llmbench.run.runner import run_benchmark
from tests.engine.serving.servers import start_server

RUN = {
    "name": "served",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 4, "input": {"mean": 40}, "output": {"mean": 2}, "max_concurrency": 1},
    "output": {"report": False},
}


@pytest.fixture(scope="module")
def server():
    running = start_server()
    yield running
    running.stop()


def run(server, out, *overrides):
    config = parse_config(RUN, ["backend.type=openai", f"backend.url={server.url}/v1", *overrides])
    return run_benchmark(config, out)


def test_chat_prompts_count_the_servers_tokens_and_keep_the_planned_ones(server, tmp_path):
    result = run(server, tmp_path / "run", "backend.endpoint=chat", "backend.prompt_format=text")
    records = load_requests(tmp_path / "run")
    # the chat template's tokens come on top of the 40 the workload planned
    assert all(r.planned_prompt_len == 40 and r.prompt_len > 40 for r in records)
    assert result.summary["metrics"]["total_input_tokens"] == sum(r.prompt_len for r in records)


def test_a_repeated_prompt_counts_its_cached_tokens(server, tmp_path):
    run(server, tmp_path / "first")
    run(server, tmp_path / "again")  # the same seed: the same prompts, now in the server's cache
    first, again = load_requests(tmp_path / "first"), load_requests(tmp_path / "again")
    assert all(r.cached_prompt_tokens == 32 for r in again)  # two full 16-token blocks of 40
    assert all(r.prompt_len == r.planned_prompt_len == 40 for r in first + again)
    assert sum(r.cached_prompt_tokens for r in first) < 32 * len(first)
