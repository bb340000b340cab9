"""Nothing measured is lost: `llmbench run` killed mid-run (SIGKILL, or Ctrl-C as SIGINT) leaves every
finished request in requests.jsonl, and `llmbench report` summarizes the run, marked incomplete."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary

NUM_REQUESTS = 200
KILL_AFTER = 8  # finished requests on disk before the kill

# the tiny model at 40 requests/s: the run would last ~5 s, it is killed after a fraction of that
SLOW_RUN = {
    "name": "crash",
    "model": {"preset": "tiny", "executor": "model", "device": "cpu"},
    "engine": {"max_num_seqs": 8, "attention_backend": "torch"},
    "workload": {
        "num_requests": NUM_REQUESTS,
        "input": {"dist": "uniform", "min": 4, "max": 24},
        "output": {"dist": "uniform", "min": 2, "max": 8},
        "arrival": {"process": "constant", "rate": 40},
    },
    "output": {"report": False},
}


def start_run(tmp_path) -> tuple[subprocess.Popen, object]:
    config = tmp_path / "crash.yaml"
    config.write_text(yaml.safe_dump(SLOW_RUN))
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "llmbench", "run", str(config), "--out", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return process, run_dir


def wait_for_lines(process: subprocess.Popen, path, count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().count("\n") >= count:
            return
        if process.poll() is not None:
            pytest.fail(f"run ended before {count} requests: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"no {count} finished requests within {timeout_s} s")


def test_sigkill_keeps_finished_requests_and_the_report_marks_the_run_incomplete(tmp_path):
    process, run_dir = start_run(tmp_path)
    wait_for_lines(process, run_dir / "requests.jsonl", KILL_AFTER)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL

    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # every line whole: each is written and flushed at once
    assert KILL_AFTER <= len(rows) < NUM_REQUESTS
    assert all(r["finish_reason"] == "length" and len(r["token_times"]) == r["output_len"] for r in rows)
    assert not (run_dir / "summary.json").exists()  # written only at the end

    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    html = (run_dir / "report.html").read_text()
    assert "INCOMPLETE" in html


def test_ctrl_c_exits_130_with_an_incomplete_summary(tmp_path):
    process, run_dir = start_run(tmp_path)
    wait_for_lines(process, run_dir / "requests.jsonl", KILL_AFTER)
    os.kill(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert "Traceback" not in process.stderr.read().decode()

    summary = RunSummary.load(run_dir).to_dict()
    rows = load_requests(run_dir)
    assert summary["complete"] is False
    finished = [r for r in rows if r.finish_reason == "length"]
    assert len(finished) >= KILL_AFTER and len(rows) < NUM_REQUESTS
    assert summary["metrics"]["completed"] == len(finished)
    # requests in flight at the interrupt are kept, marked unfinished
    assert all(r.finish_reason is None for r in rows if r not in finished)
