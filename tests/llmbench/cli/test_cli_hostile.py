"""Hostile input at the command line: each case is exit 2 with one line on stderr naming what is wrong,
no traceback, and nothing of an earlier run touched or a half-made run directory left behind."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.llmbench.cli.command_line import invoke, one_line_error
from tests.llmbench.null_run import NULL_RUN

BINARY = bytes(range(128, 256)) * 16  # not UTF-8 anywhere: 0x80 cannot start a character


@pytest.fixture
def binary_file(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_bytes(BINARY)
    return path


@pytest.mark.parametrize(
    "command", [["run"], ["ablate"], ["sweep", "--rates", "1"], ["profile", "--torch"]], ids=lambda c: c[0]
)
def test_a_config_that_is_not_utf8_is_one_line(binary_file, tmp_path, command):
    result = invoke(*command, binary_file, "--out", tmp_path / "out")
    line = one_line_error(result, "")
    assert line.endswith(f"{binary_file}: not UTF-8 text (byte 0x80 at offset 0)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty config (expected sections such as model, workload)"),
        ("# only a comment\n", "empty config (expected sections such as model, workload)"),
        ("name: a\nname: b\n", "invalid YAML: duplicate key 'name'"),
        ("a: " + "[" * 200 + "]" * 200, "invalid YAML: nested deeper than 32 levels"),
        ("a: " + "x" * (2 << 20), "larger than 1 MiB, not a config file"),
    ],
    ids=["empty", "comment", "duplicate", "deep", "huge"],
)
def test_unusable_config_files_are_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert message in one_line_error(invoke("run", path, "--out", tmp_path / "out"), f"{path}: ")
    assert not (tmp_path / "out").exists()


def test_a_device_is_not_read_to_its_end(tmp_path):
    result = invoke("run", "/dev/zero", "--out", tmp_path / "out")
    assert one_line_error(result, "") == "error: /dev/zero: larger than 1 MiB, not a config file"


def test_a_huge_value_is_not_echoed_whole(null_config_file, tmp_path):
    result = invoke(
        "run", null_config_file, "--set", "model.dtype=" + "x" * 5_000_000, "--out", tmp_path / "o"
    )
    line = one_line_error(result, "run.yaml: model.dtype: expected one of float32")
    assert len(line) < 400 and line.endswith("... (5,000,056 characters)")


@pytest.mark.parametrize(
    "override,message",
    [
        ("workload.num_requests=1000000000000", "expected an integer >= 1 and <= 1000000, got 1000000000000"),
        ("workload.input={dist: fixed, mean: 1e9}", "workload: 12 requests need more than max_model_len"),
        ("workload.prefix={groups: 1, prefix_len: 1000000000}", "more than max_model_len"),
        ("name=../../etc", "name: expected a name without '..' or control characters"),
        ("name='a\x1bb'", "name: expected a name without '..' or control characters"),
        ("output.dir=results/../../x", "output.dir: expected a path without '..' or control characters"),
    ],
    ids=["num_requests", "input_len", "prefix_len", "name_dotdot", "name_control", "dir_dotdot"],
)
def test_values_that_would_escape_or_exhaust_are_one_line(null_config_file, tmp_path, override, message):
    result = invoke("run", null_config_file, "--set", override, "--out", tmp_path / "out")
    assert message in one_line_error(result, "run.yaml: ")
    assert not (tmp_path / "out").exists(), "no run directory is made for a run that cannot start"


def test_one_request_too_long_is_counted_in_the_singular(null_config_file, tmp_path):
    sets = ["workload.num_requests=1", "workload.warmup_requests=0"]
    sets.append("workload.input={dist: fixed, mean: 1e9}")
    args = [a for s in sets for a in ("--set", s)]
    result = invoke("run", null_config_file, *args, "--out", tmp_path / "o")
    assert "workload: 1 request needs more than max_model_len" in one_line_error(result, "run.yaml: ")


def test_a_kernel_the_device_cannot_run_is_one_line(null_config_file, tmp_path):
    """FlashAttention-4 asked for on the CPU: refused before any weight loads, the reason named."""
    sets = ["model.executor=model", "model.device=cpu", "engine.prefill_attention=flash"]
    result = invoke(
        "run", null_config_file, *[a for s in sets for a in ("--set", s)], "--out", tmp_path / "o"
    )
    line = one_line_error(result, "run.yaml: ")
    assert line.endswith(": engine.prefill_attention 'flash' needs a CUDA device, the model runs on cpu")
    assert not (tmp_path / "o").exists(), "no run directory is made for a run that cannot start"


def test_repeat_is_bounded(null_config_file, tmp_path):
    result = invoke("run", null_config_file, "--repeat", "1000000000000", "--out", tmp_path / "out")
    assert (
        one_line_error(result, "") == "error: --repeat: expected an integer in [1, 1000], got 1000000000000"
    )
    assert one_line_error(invoke("run", null_config_file, "--repeat", "0"), "--repeat: ")


@pytest.mark.parametrize("command", ["run", "report"])
def test_out_naming_a_file_or_a_path_under_one(null_config_file, tmp_path, command):
    run_dir = tmp_path / "r"
    assert invoke("run", null_config_file, "--out", run_dir, "--no-report").exit_code == 0
    a_file = tmp_path / "f"
    a_file.write_text("mine")
    source = null_config_file if command == "run" else run_dir
    for out, where in ((a_file, "is a file"), (a_file / "sub", f"is under a file ({a_file})")):
        line = one_line_error(invoke(command, source, "--out", out), "")
        assert line == f"error: {out}: {where}; choose a directory"
    assert a_file.read_text() == "mine"


def test_garbage_in_requests_jsonl_under_report(null_config_file, tmp_path):
    run_dir = tmp_path / "r"
    assert invoke("run", null_config_file, "--out", run_dir, "--no-report").exit_code == 0
    rows = len((run_dir / "requests.jsonl").read_text().splitlines())
    with open(run_dir / "requests.jsonl", "ab") as f:
        f.write(b"garbage\n" + BINARY + b"\n")
    line = one_line_error(invoke("report", run_dir), "")
    assert (
        line == f"error: {run_dir / 'requests.jsonl'}:{rows + 1}: not a request row (a JSON object per line)"
    )


@pytest.fixture
def sharegpt_config(tmp_path, sharegpt):
    directory, _ = sharegpt
    config = {
        **NULL_RUN,
        "workload": {
            "num_requests": 2,
            "dataset": {"type": "sharegpt", "path": str(directory / "sharegpt.json")},
        },
        "model": {**NULL_RUN["model"], "tokenizer": str(directory / "tokenizer.json")},
    }
    path = tmp_path / "sg.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, directory


def test_a_dataset_that_is_not_utf8(sharegpt_config, tmp_path):
    path, directory = sharegpt_config
    (directory / "sharegpt.json").write_bytes(b'[{"conversations": "' + BINARY + b'"}]')
    line = one_line_error(invoke("run", path, "--out", tmp_path / "out"), "sg.yaml: workload.dataset.path: ")
    assert line.endswith("sharegpt.json is not UTF-8 text (offset 20)")


@pytest.mark.parametrize(
    ("held", "kind"), [({"conversations": []}, "object"), ("", "string"), (None, "null")]
)
def test_a_dataset_that_is_not_a_list_says_so(sharegpt_config, tmp_path, held, kind):
    path, directory = sharegpt_config
    (directory / "sharegpt.json").write_text(json.dumps(held))
    line = one_line_error(invoke("run", path, "--out", tmp_path / "out"), "sg.yaml: workload.dataset.path: ")
    assert line.endswith(f"sharegpt.json holds a JSON {kind}, not a list of conversations")


def test_a_shipped_config_given_by_name_begins_every_error_alike(sharegpt, tmp_path):
    directory, _ = sharegpt
    (directory / "sharegpt.json").write_text("{}")
    sets = [
        "workload.dataset.type=sharegpt",
        f"workload.dataset.path={directory / 'sharegpt.json'}",
        f"model.tokenizer={directory / 'tokenizer.json'}",
        "workload.prefix.groups=0",
    ]
    dataset = [arg for item in sets for arg in ("--set", item)]
    schema = invoke("run", "ci", "--set", "workload.num_requests=many", "--out", tmp_path / "a")
    read = invoke("run", "ci", *dataset, "--out", tmp_path / "b")
    one_line_error(schema, "ci.yaml: workload.num_requests: ")  # found by the schema
    one_line_error(read, "ci.yaml: workload.dataset.path: ")  # found while reading the dataset
    study = invoke("sweep", "ci", "--rates", "1", *dataset, "--out", tmp_path / "c", "--no-report")
    one_line_error(study, "ci.yaml: workload.dataset.path: ")


@pytest.mark.parametrize("turns", [["not a turn", 5], [{"from": "human", "value": 3}, {"from": "gpt"}]])
def test_dataset_entries_of_the_wrong_shape_are_skipped(sharegpt_config, tmp_path, turns):
    path, directory = sharegpt_config
    entries = json.loads((directory / "sharegpt.json").read_text())
    (directory / "sharegpt.json").write_text(json.dumps([{"conversations": turns}] + entries))
    assert invoke("run", path, "--out", tmp_path / "out").exit_code == 0


def test_an_invalid_tokenizer_json(sharegpt_config, tmp_path):
    path, directory = sharegpt_config
    (directory / "tokenizer.json").write_text('{"model": "nothing like a tokenizer"}')
    line = one_line_error(
        invoke("run", path, "--out", tmp_path / "out"), "sg.yaml: workload.dataset.tokenizer: "
    )
    assert f"cannot load {directory / 'tokenizer.json'}: " in line


def test_a_shipped_config_runs_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "ci", "--set", "workload.num_requests=4", "--set", "workload.warmup_requests=0")
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()

    assert run_dir.name.startswith("ci-") and (run_dir / "summary.json").is_file()
    names = one_line_error(invoke("run", "nosuch"), "nosuch: no such file, nor a shipped config (")
    assert "quickstart" in names and "ci" in names


def test_tilde_expands_in_out_and_output_dir(null_config_file, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    result = invoke("run", null_config_file, "--set", "output.dir=~/runs/a")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "a" / "summary.json").is_file()
    assert invoke("run", null_config_file, "--out", "~/runs/b").exit_code == 0
    assert (tmp_path / "runs" / "b" / "summary.json").is_file()
    assert not os.path.exists("~")
