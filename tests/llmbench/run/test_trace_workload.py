"""A trace replayed as a workload: Mooncake's shared hash ids become shared prompt blocks, each row
arrives at the trace's time over the speed factor, and a malformed row stops `llmbench run` with exit 2
naming the line."""

import json

import pytest
import yaml
from llmbench.engine.config import ConfigError
from typer.testing import CliRunner

from llmbench.backends.base import ModelInfo
from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.run.plan import build_workload
from llmbench.run.runner import run_benchmark
from llmbench.run.workload import WorkloadError
from tests.llmbench.null_run import NULL_RUN

INFO = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=2048, special_token_ids=(1, 2))
ROWS = [
    {"timestamp": 1000, "input_length": 1100, "output_length": 4, "hash_ids": [0, 1, 2]},
    {"timestamp": 1000, "input_length": 700, "output_length": 3, "hash_ids": [0, 3]},
    {"timestamp": 4000, "input_length": 300, "output_length": 2, "hash_ids": [4]},
    {"timestamp": 5500, "input_length": 520, "output_length": 2, "hash_ids": [0]},  # past its block
    {"timestamp": 6000, "input_length": 3000, "output_length": 2, "hash_ids": [5]},  # too long
    {"timestamp": 7000, "input_length": 64, "output_length": 5, "hash_ids": [0]},
]


@pytest.fixture
def mooncake(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def trace_config(path, **workload):
    dataset = {"type": "mooncake", "path": str(path), **workload.pop("dataset", {})}
    return parse_config({"workload": {"num_requests": 4, "dataset": dataset, **workload}})


def test_rows_that_share_hash_ids_share_those_blocks_of_prompt_and_nothing_more(mooncake):
    requests = build_workload(trace_config(mooncake), INFO).requests
    a, b, c, d = (r.prompt_token_ids for r in requests)
    assert [len(p) for p in (a, b, c, d)] == [1100, 700, 300, 520]
    assert [r.output_len for r in requests] == [4, 3, 2, 2]
    assert a[:512] == b[:512] == d[:512]  # hash id 0
    assert a[512:1024] != b[512:1024]  # ids 1 and 3
    assert a[1024:1100] != d[512:520] and c[:300] != a[:300]  # a row's tokens past its blocks are its own
    assert all(0 <= t < 512 and t not in (1, 2) for t in a + b + c + d)


def test_rows_arrive_at_the_trace_s_times_over_the_speed_factor(mooncake):
    times = [r.arrival_time for r in build_workload(trace_config(mooncake), INFO).requests]
    assert times == [0.0, 0.0, 3.0, 4.5]
    faster = build_workload(trace_config(mooncake, dataset={"speed": 2.0}), INFO).requests
    assert [r.arrival_time for r in faster] == [0.0, 0.0, 1.5, 2.25]


def test_rows_too_long_for_the_model_are_skipped_and_warm_up_shares_no_block(mooncake):
    workload = build_workload(trace_config(mooncake, warmup_requests=1), INFO)
    (warmup,) = workload.warmup
    assert (len(warmup.prompt_token_ids), warmup.output_len, warmup.arrival_time) == (64, 5, 0.0)
    assert warmup.prompt_token_ids != workload.requests[0].prompt_token_ids[:64]
    with pytest.raises(
        WorkloadError, match=r"5 usable rows in the trace \(1 longer than max_model_len=2048\), need 6"
    ):
        build_workload(trace_config(mooncake, num_requests=6), INFO)


def test_each_trial_draws_its_own_blocks_and_the_same_trial_the_same_ones(mooncake):
    config = trace_config(mooncake)
    first, again = build_workload(config, INFO), build_workload(config, INFO)
    assert first == again
    second = build_workload(config, INFO, trial=1).requests
    assert second[0].prompt_token_ids[:512] != first.requests[0].prompt_token_ids[:512]
    assert second[0].prompt_token_ids[:512] == second[1].prompt_token_ids[:512]


def test_a_burstgpt_trace_replays_its_lengths_and_times(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "10,ChatGPT,40,8,48,Conversation log\n12,GPT-4,0,0,0,API log\n13,ChatGPT,20,3,23,API log\n"
    )
    config = parse_config(
        {"workload": {"num_requests": 2, "dataset": {"type": "burstgpt", "path": str(path)}}}
    )
    requests = build_workload(config, INFO).requests
    assert [(len(r.prompt_token_ids), r.output_len, r.arrival_time) for r in requests] == [
        (40, 8, 0.0),
        (20, 3, 3.0),
    ]


def test_a_trace_takes_no_prefix_groups_no_ramp_and_needs_a_path(mooncake):
    with pytest.raises(ConfigError, match="workload.prefix.groups: a trace's rows make the prompts"):
        trace_config(mooncake, prefix={"groups": 2, "prefix_len": 4})
    ramp = {"process": "poisson", "ramp_up": {"duration_s": 10}}
    with pytest.raises(ConfigError, match="workload.arrival.ramp_up: a trace is replayed at its own times"):
        trace_config(mooncake, arrival=ramp)
    with pytest.raises(ConfigError, match="workload.dataset.path: a burstgpt dataset needs a path"):
        parse_config({"workload": {"dataset": {"type": "burstgpt"}}})


def test_a_trace_runs_through_the_engine(tmp_path, mooncake):
    config = parse_config(
        {
            **NULL_RUN,
            "workload": {
                "num_requests": 4,
                "dataset": {"type": "mooncake", "path": str(mooncake), "speed": 100.0},
            },
        }
    )
    result = run_benchmark(config, tmp_path / "run")
    assert result.summary.to_dict()["metrics"]["completed"] == 4
    assert result.summary.to_dict()["metrics"]["total_input_tokens"] == 1100 + 700 + 300 + 520


def test_a_malformed_row_is_exit_2_naming_the_file_and_line(tmp_path, mooncake):
    with mooncake.open("a") as f:
        f.write('{"timestamp": 8000, "input_length": "long", "output_length": 1}\n')
    config = {
        **NULL_RUN,
        "workload": {"num_requests": 6, "dataset": {"type": "mooncake", "path": str(mooncake)}},
    }
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    where = f"error: trace.yaml: workload.dataset.path: {mooncake}:7"
    assert line == f"{where}: input_length: expected an integer >= 1, got long"


def test_the_replay_s_span_is_said_up_front_and_one_past_max_span_s_refused(tmp_path, mooncake, caplog):
    with caplog.at_level("INFO", logger="llmbench.run.trace_workload"):
        build_workload(trace_config(mooncake), INFO)
    assert "trace: replaying 4 requests over 4.5 s at speed 1" in caplog.messages
    days = tmp_path / "days.jsonl"  # a row 11.6 days in: waited for, had nothing said otherwise
    days.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({**ROWS[2], "timestamp": 1_000_000_000}) + "\n")
    with pytest.raises(WorkloadError, match="^workload.dataset.max_span_s: "):  # before a run could wait
        build_workload(trace_config(days, num_requests=2), INFO)
    config = {**NULL_RUN, "workload": {"num_requests": 2, "dataset": {"type": "mooncake", "path": str(days)}}}
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "error: trace.yaml: workload.dataset.max_span_s: the trace's 2 requests over 11.6 days at speed 1, "
        "more than 6.0 h; raise max_span_s to replay it, or workload.dataset.speed to replay it faster"
    ]
    assert not (tmp_path / "out").exists()  # refused before the run began
    lifted = trace_config(days, num_requests=2, dataset={"max_span_s": 1e6})
    assert build_workload(lifted, INFO).requests[-1].arrival_time == 1_000_000 - 1
