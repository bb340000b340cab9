import csv
import dataclasses
import json
import os
from stat import S_IMODE

import pytest
from llmbench.engine.observe.timing import StepRecord
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.results.files import load_steps, write_atomic
from llmbench.results.records import RequestRecord, load_requests
from llmbench.results.summary import RunSummary
from llmbench.run.directory import claim_run_dir

REQUEST_KEYS = {
    "id",
    "trial",
    "warmup",
    "prompt_len",
    "output_len",
    "finish_time",
    "submit_time",
    "first_token_time",
    "token_times",
    "finish_reason",
    "error",
}
ENV_KEYS = {
    "llmbench",
    "git_commit",
    "python",
    "platform",
    "cpu",
    "cpu_cores",
    "torch_threads",
    "torch",
    "triton",
    "transformers",
    "flash_attn_4",
    "gpu",
    "gpu_memory_gb",
    "cuda",
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, null_config_file_module):
    out = tmp_path_factory.mktemp("runs") / "r"
    result = CliRunner().invoke(app, ["run", str(null_config_file_module), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def null_config_file_module(tmp_path_factory):
    import yaml

    from tests.llmbench.null_run import NULL_RUN

    path = tmp_path_factory.mktemp("cfg") / "run.yaml"
    path.write_text(yaml.safe_dump({**NULL_RUN, "slo": {"ttft_ms": 1000}}))
    return path


def test_run_directory_holds_the_four_files(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert names == {"config.yaml", "requests.jsonl", "steps.csv", "summary.json"}


def test_summary_schema(run_dir):
    summary = RunSummary.load(run_dir).to_dict()
    assert summary["schema_version"] == 2
    assert summary["name"] == "t"
    assert summary["complete"] is True
    assert summary["started_at"].endswith("+00:00")
    assert summary["config"]["workload"]["num_requests"] == 12
    assert summary["config"]["engine"]["max_num_seqs"] == 8
    assert ENV_KEYS <= set(summary["environment"])
    m = summary["metrics"]
    assert (m["completed"], m["failed"]) == (12, 0)
    assert m["request_goodput"] == pytest.approx(m["request_throughput"])  # a 1 s TTFT SLO is always met
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "min", "max", "p50", "p90", "p95", "p99"):
            assert isinstance(m[f"{stat}_{name}_ms"], float)
    assert summary["steps"]["num_steps"] > 0
    assert "trials" not in summary  # a single trial


def test_requests_jsonl_schema(run_dir):
    lines = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == 14
    assert all(set(line) == REQUEST_KEYS for line in lines)  # no token ids unless save_tokens
    warmup = [line for line in lines if line["warmup"]]
    assert sorted(line["id"] for line in warmup) == ["warmup-0", "warmup-1"]
    for line in lines:
        assert line["finish_reason"] == "length"
        assert len(line["token_times"]) == line["output_len"] >= 1
        assert line["first_token_time"] == line["token_times"][0] >= line["submit_time"] >= 0
        assert line["token_times"] == sorted(line["token_times"])
    assert load_requests(run_dir)[0] == RequestRecord(**lines[0])


def test_steps_csv_schema(run_dir):
    with open(run_dir / "steps.csv") as f:
        header = next(csv.reader(f))
    derived = ["cpu_ms", "mbu", "mfu"]  # llmbench.metrics.steps.derived_columns
    assert header == ["trial"] + [field.name for field in dataclasses.fields(StepRecord)] + derived
    rows = load_steps(run_dir)
    assert len(rows) == RunSummary.load(run_dir).to_dict()["steps"]["num_steps"]
    # relative to the run start, like the request times; warm-up steps are left out
    first_timed_submit = min(r.submit_time for r in load_requests(run_dir) if not r.warmup)
    assert 0 <= rows[0]["t_start"] and rows[0]["t_start"] >= first_timed_submit - 1e-3
    assert all(r["t_end"] >= r["t_start"] for r in rows)
    assert sum(r["num_prefill_tokens"] for r in rows) == sum(r.prompt_len for r in load_requests(run_dir)[2:])


def test_config_yaml_reloads_to_the_same_config(run_dir):
    from llmbench.config.load import load_config

    assert load_config(run_dir / "config.yaml").to_dict() == RunSummary.load(run_dir).to_dict()["config"]


def test_save_tokens_adds_token_ids(tmp_path, null_config_file_module):
    out = tmp_path / "r"
    args = ["run", str(null_config_file_module), "--out", str(out), "--set", "output.save_tokens=true"]
    assert CliRunner().invoke(app, args).exit_code == 0
    for record in load_requests(out):
        assert len(record.prompt_token_ids) == record.prompt_len
        assert len(record.output_token_ids) == record.output_len


def test_write_atomic_replaces_whole_files(tmp_path):
    path = tmp_path / "summary.json"
    write_atomic(path, "old")
    write_atomic(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left behind


def test_files_get_the_process_umask(tmp_path, null_config_file):
    old = os.umask(0o027)
    try:
        out = tmp_path / "r"
        assert CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(out)]).exit_code == 0
    finally:
        os.umask(old)
    modes = {p.name: S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == dict.fromkeys(["config.yaml", "requests.jsonl", "steps.csv", "summary.json"], 0o640)


def test_a_second_run_into_a_run_directory_is_refused_unless_forced(tmp_path, null_config_file):
    out = tmp_path / "r"
    first = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(out)])
    assert first.exit_code == 0
    rows = (out / "requests.jsonl").read_text()
    (out / "old.png").write_text("a plot of the old run")
    again = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(out)])
    assert again.exit_code == 2
    assert again.stderr == (
        f"error: {out} already holds a run (summary.json, requests.jsonl, steps.csv, config.yaml); "
        "choose another --out (llmbench run --force replaces it)\n"
    )
    assert (out / "requests.jsonl").read_text() == rows, "nothing of the first run is touched"
    forced = CliRunner().invoke(
        app, ["run", str(null_config_file), "--out", str(out), "--force", "--set", "name=b"]
    )
    assert forced.exit_code == 0
    assert (
        len(load_requests(out)) == 14 and RunSummary.load(out).to_dict()["name"] == "b"
    )  # the new run's rows alone
    assert not (out / "old.png").exists()


def test_two_runs_cannot_write_into_one_directory_at_once(tmp_path, null_config_file):
    out = tmp_path / "r"
    lock = claim_run_dir(out, replace=False)  # a run in progress there
    try:
        result = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(out)])
    finally:
        os.close(lock)
    assert result.exit_code == 2
    # the progress bar's stop leaves an empty line first
    assert (
        result.stderr.strip()
        == f"error: run.yaml: {out}: another run is writing into it; choose another --out"
    )
    assert list(out.iterdir()) == []


def test_the_default_run_directory_is_one_directory_under_the_root(tmp_path):
    from llmbench.run.result_files import default_run_dir

    path = default_run_dir("ci @ 40 req/s", tmp_path)
    assert path.parent == tmp_path and path.name.startswith("ci @ 40 req_s-")
