"""A run against a real `llmbench serve` (the tiny model on CPU, 127.0.0.1, a free port): what the
server's usage says about each prompt (its own token count, the tokens its prefix cache held) reaches
the request rows and the trial's metrics."""

from __future__ import annotations

from llmbench.config.load import parse_config
from llmbench.report import write_report
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark

RUN = {
    "name": "served",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 4, "input": {"mean": 40}, "output": {"mean": 2}, "max_concurrency": 1},
    "output": {"report": False},
}


def run(server, out, *overrides):
    config = parse_config(RUN, ["backend.type=openai", f"backend.url={server.url}/v1", *overrides])
    return run_benchmark(config, out)


def test_chat_prompts_count_the_servers_tokens_and_keep_the_planned_ones(server, tmp_path):
    result = run(server, tmp_path / "run", "backend.endpoint=chat", "backend.prompt_format=text")
    records = load_requests(tmp_path / "run")
    # the chat template's tokens come on top of the 40 the workload planned
    assert all(r.planned_prompt_len == 40 and r.prompt_len > 40 for r in records)
    assert result.summary.to_dict()["metrics"]["total_input_tokens"] == sum(r.prompt_len for r in records)


def test_a_repeated_prompt_counts_its_cached_tokens(server, tmp_path):
    run(server, tmp_path / "first")
    run(server, tmp_path / "again")  # the same seed: the same prompts, now in the server's cache
    first, again = load_requests(tmp_path / "first"), load_requests(tmp_path / "again")
    assert all(r.cached_prompt_tokens == 32 for r in again)  # two full 16-token blocks of 40
    assert all(r.prompt_len == r.planned_prompt_len == 40 for r in first + again)
    assert sum(r.cached_prompt_tokens for r in first) < 32 * len(first)


def test_a_warm_cache_is_warned_of_and_a_reset_empties_it(server, tmp_path):
    seed = "workload.seed=7"  # prompts no other test sends
    cold = run(server, tmp_path / "cold", seed)
    warm = run(server, tmp_path / "warm", seed)  # the same prompts: the first run warmed the cache
    reset = run(server, tmp_path / "reset", seed, "backend.reset_prefix_cache=true")
    assert (
        "warnings" not in cold.summary.to_dict()
        and cold.summary.to_dict()["metrics"]["warm_cache_requests"] == 0
    )
    assert warm.summary.to_dict()["metrics"]["warm_cache_requests"] == 4
    assert warm.summary.to_dict()["warnings"][0].startswith(
        "trial 1: 4 of 4 requests found 128 prompt tokens"
    )
    assert "backend.reset_prefix_cache: true" in warm.summary.to_dict()["warnings"][0]
    # the server's own counters say the same
    assert warm.summary.to_dict()["server_metrics"]["prefix_cache_hit_rate_by_trial"][0] > 0.5
    assert reset.summary.to_dict()["server_metrics"]["prefix_cache_hit_rate_by_trial"] == [0.0]
    page = write_report([tmp_path / "warm"], tmp_path / "warm").read_text()
    assert "WARNING</span> " in page and "prefix cache that no earlier request" in page
    assert (
        "warnings" not in reset.summary.to_dict()
        and reset.summary.to_dict()["metrics"]["cached_prompt_tokens"] == 0
    )


def test_a_shared_prefix_the_trial_itself_fills_is_no_warning(server, tmp_path):
    # four requests of one 32-token prefix: the three after the first find it in the cache
    result = run(
        server,
        tmp_path / "run",
        "workload.seed=8",
        "workload.prefix.groups=1",
        "workload.prefix.prefix_len=32",
    )
    assert result.summary.to_dict()["metrics"]["cached_prompt_tokens"] >= 3 * 32
    assert (
        result.summary.to_dict()["metrics"]["warm_cache_requests"] == 0
        and "warnings" not in result.summary.to_dict()
    )


def test_a_server_that_cannot_reset_stops_the_run_with_one_line_naming_the_setting(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from llmbench.cli import app
    from llmbench.mock_server import MockServer, MockSettings

    with MockServer(MockSettings(ttft_ms=0, itl_ms=0)) as mock:  # the mock has no reset
        backend = {"type": "openai", "url": mock.url, "reset_prefix_cache": True}
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(RUN | {"backend": backend}))
        result = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out")])
        sent = [(r.path, r.tokens) for r in mock.records()]
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "backend.reset_prefix_cache: the server refuses" in lines[0]
    assert f"POST {mock.root}/reset_prefix_cache answered HTTP 404" in lines[0]
    # the preflight's one-token request, then vLLM's reset and SGLang's; none of the load
    assert sent == [("/v1/completions", 1), ("/reset_prefix_cache", 0), ("/flush_cache", 0)]
    assert not (tmp_path / "out").exists()


def test_saved_text_prompts_are_the_text_sent_and_its_tokens(server, tmp_path):
    from llmbench.backends.prompt_text import PromptText

    overrides = ["backend.prompt_format=text", "output.save_tokens=true", "workload.seed=9"]
    run(server, tmp_path / "run", *overrides)
    tokenizer = PromptText(
        parse_config(RUN, ["backend.type=openai", "backend.url=http://x", *overrides])
    ).tokenizer
    records = load_requests(tmp_path / "run")
    assert len(records) == 4
    for record in records:
        assert record.prompt and len(record.prompt_token_ids) == 40
        assert tokenizer.encode(record.prompt, add_special_tokens=False).ids == record.prompt_token_ids
