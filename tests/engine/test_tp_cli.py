"""`llmbench run` and `llmbench ablate` with engine.tensor_parallel_size: a 2-rank tiny-model run
records each step's communication time; unusable sizes exit 2 with one line, a rank dying at startup
exits 1 with one line; Ctrl-C stops every rank."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.results.files import load_steps
from llmbench.results.summary import RunSummary
from tests.engine.helpers import wait_gone
from tests.llmbench.null_run import NULL_RUN

TP_RUN = {
    **NULL_RUN,
    "model": {"preset": "tiny", "device": "cpu", "dtype": "float32"},
    "engine": {**NULL_RUN["engine"], "tensor_parallel_size": 2},
    "workload": {**NULL_RUN["workload"], "num_requests": 6},
}


@pytest.fixture
def tp_config(tmp_path):
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump(TP_RUN))
    return path


def test_a_two_rank_run_records_communication_per_step(tmp_path, tp_config):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tp_config), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    steps = [row for row in load_steps(out) if row["num_prefill_tokens"] or row["num_decode_seqs"]]
    assert steps and all(row["comm_ms"] > 0 for row in steps)
    summary = RunSummary.load(out).to_dict()
    assert summary["config"]["engine"]["tensor_parallel_size"] == 2
    assert summary["steps"]["mean_comm_ms"] > 0


def test_ablate_runs_every_variant_on_two_ranks(tmp_path, tp_config):
    out = tmp_path / "ablation"
    args = ["ablate", str(tp_config), "--order", "async_output", "--repeat", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    variants = json.loads((out / "ablation.json").read_text())["variants"]
    assert [v["name"] for v in variants][-1] == "all on"
    for variant in variants:
        assert (
            RunSummary.load(out / variant["run_dir"]).to_dict()["config"]["engine"]["tensor_parallel_size"]
            == 2
        )


@pytest.mark.parametrize(
    "size, message",
    [
        ("0", "engine.tensor_parallel_size: expected an integer >= 1 and <= 64, got 0"),
        ("3", "engine.tensor_parallel_size 3 does not divide the model's 2 KV heads"),
    ],
)
def test_an_unusable_size_exits_2_with_one_line(tmp_path, tp_config, size, message):
    out = tmp_path / "run"
    args = [
        "run",
        str(tp_config),
        "--out",
        str(out),
        "--no-report",
        "--set",
        f"engine.tensor_parallel_size={size}",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_a_rank_that_dies_while_starting_exits_1_with_one_line(tmp_path, tp_config, monkeypatch):
    """Not the input's fault, so exit 1, but said in one line, not a traceback; nothing measured, no
    run directory."""
    monkeypatch.setenv("PYTHONHOME", "/nonexistent")  # read only by the worker's fresh interpreter
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tp_config), "--out", str(out), "--no-report"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines == ["error: tp.yaml: tensor-parallel rank 1 exited with code 1 during startup"]
    assert not out.exists()


def test_a_rank_gone_before_it_reads_its_config_exits_1_with_one_line(tmp_path, tp_config, monkeypatch):
    """On a loaded host the worker may exit before rank 0 writes its config into its stdin: the closed
    pipe is that rank's startup failure too, not a silent exit (click takes an EPIPE for a closed stdout
    and exits 1 without a word)."""
    from llmbench.engine.parallel import launch

    def spawn_then_wait_for_it(*args, **kwargs):
        process = subprocess.Popen(*args, **kwargs)
        process.wait()  # rank 0 descheduled until the worker has died
        return process

    monkeypatch.setattr(
        launch, "subprocess", SimpleNamespace(Popen=spawn_then_wait_for_it, PIPE=subprocess.PIPE)
    )
    monkeypatch.setenv("PYTHONHOME", "/nonexistent")
    result = CliRunner().invoke(app, ["run", str(tp_config), "--out", str(tmp_path / "run"), "--no-report"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        "error: tp.yaml: tensor-parallel rank 1 exited with code 1 during startup"
    ]


def test_ctrl_c_stops_every_rank(tmp_path):
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump({**TP_RUN, "workload": {**TP_RUN["workload"], "num_requests": 100000}}))
    command = [
        sys.executable,
        "-m",
        "llmbench",
        "run",
        str(config),
        "--out",
        str(tmp_path / "run"),
        "--no-report",
    ]
    run = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not (workers := children(run.pid)):
            assert time.monotonic() < deadline and run.poll() is None, "no worker rank started"
            time.sleep(0.2)
        time.sleep(3)  # into the run's steps
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C does to the terminal's process group
        assert run.wait(30) == 130
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert wait_gone(workers)


def children(pid: int) -> list[int]:
    """The worker ranks among a process's children."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        pids = [int(p) for p in f.read().split()]
    return [p for p in pids if b"llmbench.engine.parallel.worker" in Path(f"/proc/{p}/cmdline").read_bytes()]
