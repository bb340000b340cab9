"""`llmbench capacity` end to end on the null executor with a simulated forward: in process and through
our HTTP server. The engine cannot go faster than its simulated device (each forward sleeps 10 ms, at
most 2 sequences run, each needs 4 forwards), so at 160 req/s most requests must miss a 150 ms E2EL
whatever the machine: the answer's failing bound lies at or below it. Everything else is checked
against what the runs measured, not against timings."""

import json
import math

import msgspec
import pytest
import yaml
from llmbench.engine.config import EngineConfig, ModelConfig
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.results.metrics import Latencies, Metrics
from llmbench.results.summary import RunSummary
from llmbench.studies.capacity import goodput_share
from tests.engine.serving.servers import RunningServer

NULL_DEVICE = {
    "name": "knee",
    "model": {"preset": "tiny", "executor": "null", "null_forward_ms": 10.0},
    "engine": {"max_num_seqs": 2, "max_num_batched_tokens": 256},
    "workload": {
        "num_requests": 24,
        "input": {"mean": 8},
        "output": {"mean": 4},
        "arrival": {"process": "constant", "rate": 20},
    },
    "slo": {"e2el_ms": 150},
    "output": {"report": False},
}


def search(tmp_path, config, *args):
    path = tmp_path / "knee.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "search"
    # 1.2 s a rate probe: 24 requests at 20 req/s, 192 at 160
    seconds = [] if "--seconds" in args else ["--seconds", "1.2"]
    command = ["capacity", str(path), "--out", str(out), "--no-report", *seconds, *args]
    result = CliRunner().invoke(app, command)
    return result, out


def check_answer(out, target=0.95, repeats=2, tolerance=0.5):
    data = json.loads((out / "capacity.json").read_text())
    assert data["complete"]
    assert data["slo"] == {"ttft_ms": None, "tpot_ms": None, "e2el_ms": 150}
    passing, failing = data["passing"], data["failing"]
    assert passing is not None and failing is not None
    assert failing <= 160 and failing <= passing * (1 + tolerance)
    probes = {p["value"]: p for p in data["probes"]}
    for probe in probes.values():
        assert probe["passed"] == (probe["goodput_share"] >= target)
        if probe["value"] < failing:  # below the lowest failing load, every probe passed
            assert probe["passed"]
    assert len(probes[passing]["shares"]) == len(probes[failing]["shares"]) == repeats
    for run in data["runs"]:  # each run's share is what its own summary says
        assert run["goodput_share"] == goodput_share(RunSummary.load(out / run["run_dir"]).metrics)
    assert (out / "capacity.png").stat().st_size > 0
    assert json.loads((out / "summary.json").read_text())["config"]["workload"]["arrival"]["rate"] == passing
    return data


def test_the_search_finds_the_knee_of_the_null_executor_within_its_interval(tmp_path):
    result, out = search(tmp_path, NULL_DEVICE, "--start", "20", "--tolerance", "0.5", "--repeats", "2")
    assert result.exit_code == 0, result.output
    data = check_answer(out)
    assert "answer: at least" in result.output
    # one rerun at each of the two bounds the answer names; how many earlier bounds a rerun overturned
    # (and so how many reruns there were in all) depends on the host's speed, as goodput does
    reruns = {r["value"] for r in data["runs"] if r["repeat"] == 1}
    assert {data["passing"], data["failing"]} <= reruns


def test_the_search_finds_the_knee_through_our_http_server(tmp_path):
    model = ModelConfig(preset="tiny", executor="null", null_forward_ms=10.0)
    server = RunningServer(EngineConfig(model=model, max_num_seqs=2, max_num_batched_tokens=256))
    try:
        config = {**NULL_DEVICE, "backend": {"type": "openai", "url": f"{server.url}/v1"}}
        result, out = search(tmp_path, config, "--start", "20", "--tolerance", "0.5", "--repeats", "2")
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    check_answer(out)


@pytest.mark.parametrize(
    ("change", "args", "message"),
    [
        ({"slo": {}}, [], "knee.yaml: set slo.ttft_ms, slo.tpot_ms or slo.e2el_ms"),
        ({}, ["--by", "tokens"], "--by: expected rate or concurrency, got 'tokens'"),
        ({}, ["--start", "5000"], "expected 0 < --lowest (0.1) <= --start (5000) <= --highest (1000)"),
        ({}, ["--by", "concurrency", "--start", "2.5"], "concurrency takes whole numbers"),
        # float() reads 1e400 as inf: a probe past the config's rate bound, or int(inf) for concurrency
        ({}, ["--highest", "1e400"], "expected rate >= 0.001 and <= 1,000,000, got 20, 0.1 and inf"),
        ({}, ["--by", "concurrency", "--highest", "1e400"], "expected concurrency >= 1 and <= 1,000,000"),
        ({}, ["--seconds", "-1"], "--seconds: expected 0 to 86,400, got -1"),
        ({}, ["--seconds", "nan"], "--seconds: expected 0 to 86,400, got nan"),
    ],
)
def test_unusable_settings_are_one_line_and_exit_2(tmp_path, change, args, message):
    result, out = search(tmp_path, {**NULL_DEVICE, **change}, *args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not out.exists()


def test_a_rate_probe_offers_its_rate_for_the_given_seconds(tmp_path):
    # a fixed count would make a high rate a burst that one batch absorbs; each probe's request count is
    # its rate times --seconds (at least 10), and --seconds 0 keeps the config's count
    args = ["--start", "20", "--max-runs", "3", "--repeats", "1"]
    (tmp_path / "timed").mkdir()
    (tmp_path / "fixed").mkdir()
    _, out = search(tmp_path / "timed", NULL_DEVICE, *args, "--seconds", "2")
    _, fixed = search(tmp_path / "fixed", NULL_DEVICE, *args, "--seconds", "0")
    for directory, expected in ((out, lambda rate: max(10, math.ceil(rate * 2))), (fixed, lambda rate: 24)):
        runs = json.loads((directory / "capacity.json").read_text())["runs"]
        assert len(runs) == 3
        for run in runs:
            config = json.loads((directory / run["run_dir"] / "summary.json").read_text())["config"]
            assert config["workload"]["num_requests"] == expected(run["value"])
            assert run["metrics"]["completed"] + run["metrics"]["failed"] == expected(run["value"])


def test_a_run_s_share_counts_failed_and_unstarted_requests_as_missing():
    metrics = Metrics(
        completed=8,
        failed=1,
        not_started=1,
        request_goodput=3.5,
        duration_s=2.0,
        total_input_tokens=800,
        total_output_tokens=800,
        request_throughput=4.0,
        output_throughput=400.0,
        total_token_throughput=800.0,
        latencies=Latencies(),
    )
    assert goodput_share(metrics) == 0.7
    assert goodput_share(msgspec.structs.replace(metrics, request_goodput=None)) == 0.0
    assert goodput_share(None) == 0.0
