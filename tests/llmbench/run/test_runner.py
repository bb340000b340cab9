import gc
import json
import time

import numpy as np
import pytest
from llmbench.engine.core.gc_heap import YOUNG_GC_THRESHOLD
from typer.testing import CliRunner

import llmbench
import llmbench.backends.factory
import llmbench.run.runner
from llmbench.backends.bundled import BundledBackend
from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.metrics.steps import gpu_busy_step_spans
from llmbench.results.files import load_steps
from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark
from tests.llmbench.null_run import NULL_RUN


class HookedBackend(BundledBackend):
    """The bundled backend with a hook: raise `exc` at the first poll after `after` timed requests
    finished, and track how many requests were in flight at once."""

    def __init__(self, after=None, exc=KeyboardInterrupt):
        self.after, self.exc = after, exc
        self.finished = self.in_flight = self.max_in_flight = 0

    def submit(self, request_id, prompt_token_ids, params, due=None, model=None):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        super().submit(request_id, prompt_token_ids, params, due, model)

    def poll(self, while_waiting=None):
        if self.after is not None and self.finished >= self.after:
            raise self.exc()
        outputs = super().poll(while_waiting)
        done = [o for o in outputs if o.finished]
        self.in_flight -= len(done)
        self.finished += sum(1 for o in done if "warmup" not in o.request_id)
        return outputs


def start(backend, **overrides):
    config = parse_config(NULL_RUN, [f"{k}={v}" for k, v in overrides.items()])
    backend.start(config)
    return config, backend


def test_ctrl_c_writes_partial_results_marked_incomplete(tmp_path):
    config, backend = start(HookedBackend(after=5), **{"workload.num_requests": 40})
    result = run_benchmark(config, tmp_path, backend=backend)
    assert result.interrupted
    summary = RunSummary.load(tmp_path).to_dict()
    assert summary["complete"] is False
    records = load_requests(tmp_path)
    timed = [r for r in records if not r.warmup]
    assert summary["metrics"]["completed"] == sum(r.finish_reason == "length" for r in timed) >= 5
    unfinished = [r for r in timed if r.finish_reason is None]
    assert unfinished, "requests in flight at the interrupt are kept, unfinished"
    assert all(len(r.token_times) == r.output_len for r in unfinished)
    assert summary["steps"]["num_steps"] == len(load_steps(tmp_path)) > 0


def test_ctrl_c_through_the_cli_exits_130_with_results(tmp_path, monkeypatch, null_config_file):
    def make(config, step_hook):
        return start(HookedBackend(after=3), **{})[1]

    monkeypatch.setattr(llmbench.backends.factory, "make_backend", make)
    result = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(tmp_path / "r")])
    assert result.exit_code == 130
    summary = RunSummary.load(tmp_path / "r").to_dict()
    assert summary["complete"] is False
    finished = [r for r in load_requests(tmp_path / "r") if not r.warmup and r.finish_reason == "length"]
    assert summary["metrics"]["completed"] == len(finished) >= 3


def test_failure_mid_run_exits_1_and_keeps_what_was_measured(tmp_path, monkeypatch, null_config_file):
    monkeypatch.setattr(
        llmbench.backends.factory, "make_backend", lambda c, hook: start(HookedBackend(4, RuntimeError))[1]
    )
    result = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    summary = RunSummary.load(tmp_path / "r").to_dict()
    assert summary["complete"] is False
    finished = [r for r in load_requests(tmp_path / "r") if not r.warmup and r.finish_reason == "length"]
    assert summary["metrics"]["completed"] == len(finished) >= 4


def test_requests_are_submitted_at_their_arrival_times(tmp_path):
    overrides = {"workload.arrival": "{process: constant, rate: 50}", "workload.warmup_requests": 0}
    config, backend = start(HookedBackend(), **overrides)
    run_benchmark(config, tmp_path, backend=backend)
    submits = [r.submit_time for r in load_requests(tmp_path)]
    assert np.diff(sorted(submits)) == pytest.approx([0.02] * 11, abs=1e-9)
    assert all(r.first_token_time >= r.submit_time for r in load_requests(tmp_path))


def test_max_concurrency_limits_requests_in_flight(tmp_path):
    config, backend = start(HookedBackend(), **{"workload.max_concurrency": 2, "workload.warmup_requests": 0})
    run_benchmark(config, tmp_path, backend=backend)
    assert backend.max_in_flight == 2
    records = sorted(load_requests(tmp_path), key=lambda r: r.submit_time)
    ends = sorted(r.token_times[-1] for r in records)
    # the third request waits for the first to finish, and counts from the slot opening
    assert records[2].submit_time >= ends[0]


def test_repeat_runs_independent_trials_and_reports_their_median(tmp_path, null_config_file):
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(out), "--repeat", "3"])
    assert result.exit_code == 0, result.output
    summary = RunSummary.load(out).to_dict()
    assert len(summary["trials"]) == 3
    ttfts = [t["mean_ttft_ms"] for t in summary["trials"]]
    assert summary["metrics"]["mean_ttft_ms"] == pytest.approx(float(np.median(ttfts)))
    records = load_requests(out)
    assert sorted({r.trial for r in records}) == [0, 1, 2]
    # trial k draws workload seed + k: the same ids, other prompts
    by_trial = {k: [r.prompt_len for r in records if r.trial == k and not r.warmup] for k in range(3)}
    assert by_trial[0] != by_trial[1]
    assert {row["trial"] for row in load_steps(out)} == {0, 1, 2}


def test_set_overrides_reach_the_run(tmp_path, null_config_file):
    out = tmp_path / "r"
    args = [
        "run",
        str(null_config_file),
        "--out",
        str(out),
        "--set",
        "workload.num_requests=5",
        "--set",
        "engine.block_size=8",
        "--set",
        "name=renamed",
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    summary = RunSummary.load(out).to_dict()
    assert summary["name"] == "renamed"
    assert summary["config"]["engine"]["block_size"] == 8
    assert summary["metrics"]["completed"] == 5


def test_env_prints_versions_and_hardware():
    result = CliRunner().invoke(app, ["env", "--bandwidth"])
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["torch"] and info["python"] and info["cpu_cores"] >= 1
    assert info["bandwidth"]["copy_gb_per_s"] > 0
    assert info["torch_threads"] == 1  # the default hardware.cpu_threads, as a run applies it
    assert info["llmbench"] == llmbench.__version__ and "git_commit" in info


@pytest.mark.parametrize("command", ["run", "env"])
def test_help_shows_an_example(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Example" in result.stdout and "llmbench " + command in result.stdout


def test_python_dash_m_runs_the_cli():
    import subprocess
    import sys

    command = [sys.executable, "-m", "llmbench", "env"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    environment = json.loads(result.stdout)
    # what summary.json records as the command that made a run
    assert environment["python"].count(".") == 2 and environment["command"] == "python -m llmbench env"


def test_ctrl_c_counts_requests_without_a_token_as_not_started(tmp_path):
    # all 40 submitted at once, 8 run at a time: most are still queued in the engine at the interrupt
    config, backend = start(HookedBackend(after=3), **{"workload.num_requests": 40})
    result = run_benchmark(config, tmp_path, backend=backend)
    metrics = result.summary.to_dict()["metrics"]
    timed = [r for r in load_requests(tmp_path) if not r.warmup]
    assert all(r.output_len > 0 for r in timed), "a request without a token is counted, not recorded"
    unfinished = [r for r in timed if r.finish_reason is None]
    assert metrics["completed"] + metrics["failed"] == len(timed)
    assert metrics["failed"] == len(unfinished)
    assert metrics["not_started"] == 40 - len(timed) > 0
    not_started = f"{metrics['not_started']} request{'' if metrics['not_started'] == 1 else 's'}"
    assert result.summary.to_dict()["stop_reason"] == f"interrupted (Ctrl-C); {not_started} not started"


def test_cpu_threads_are_applied_and_recorded(tmp_path, null_config_file):
    import os

    import torch

    out = tmp_path / "r"
    args = ["run", str(null_config_file), "--out", str(out), "--set", "hardware.cpu_threads=2"]
    assert CliRunner().invoke(app, args).exit_code == 0
    environment = RunSummary.load(out).to_dict()["environment"]
    assert torch.get_num_threads() == environment["torch_threads"] == 2  # tests/conftest.py restores it
    assert os.environ["OMP_NUM_THREADS"] == "2"  # what a process-split engine core starts with
    assert environment["llmbench"] == llmbench.__version__
    # this checkout is a git repository: its commit is recorded, "+dirty" when tracked files changed
    assert environment["git_commit"] is None or len(environment["git_commit"].split("+")[0]) == 40


def test_a_failure_before_the_first_row_names_no_run_directory(
    tmp_path, monkeypatch, null_config_file, caplog
):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug while building the workload")

    monkeypatch.setattr(llmbench.run.runner, "build_workload", broken)
    result = CliRunner().invoke(app, ["run", str(null_config_file), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "run failed before anything was measured" in caplog.text
    assert not (tmp_path / "r").exists()


def test_the_timed_trials_run_with_the_engine_core_s_garbage_collector(tmp_path):
    """In-process runs collect as the engine core process does (engine/core/gc_heap.py): the loaded heap
    frozen, young collections every YOUNG_GC_THRESHOLD allocations, so in-process and split compare
    like for like."""
    threshold = gc.get_threshold()
    seen = {}

    class Watching(HookedBackend):
        def poll(self, while_waiting=None):
            seen.setdefault("young", gc.get_threshold()[0])
            seen.setdefault("frozen", gc.get_freeze_count())
            return super().poll(while_waiting)

    config, backend = start(Watching(), **{"workload.warmup_requests": 0})
    try:
        run_benchmark(config, tmp_path, backend=backend)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert seen["young"] == YOUNG_GC_THRESHOLD and seen["frozen"] > 0


class TimedSteps(BundledBackend):
    """The null engine's step records, each given a GPU span as long as its host span."""

    def drain_step_records(self):
        records = super().drain_step_records()
        for record in records:
            record.gpu_start, record.gpu_end = record.t_start, record.t_end
            record.gpu_ms = (record.t_end - record.t_start) * 1e3
        return records


def test_the_summarys_gpu_busy_takes_each_trial_alone(tmp_path, monkeypatch):
    # the time between trials (building the next workload, here made long) is no step's: it is idle
    # time of no trial
    build = llmbench.run.runner.build_workload

    def slow_build(*args, **kwargs):
        time.sleep(0.2)
        return build(*args, **kwargs)

    monkeypatch.setattr(llmbench.run.runner, "build_workload", slow_build)
    config, backend = start(TimedSteps(), **{"workload.num_requests": 8})
    result = run_benchmark(config, tmp_path, repeat=2, backend=backend)
    steps, rows = result.summary.to_dict()["steps"], load_steps(tmp_path)
    assert {row["trial"] for row in rows} == {0, 1}
    # the figures steps.csv gives trial by trial; before, the 0.2 s pause made busy read 0.03. How
    # busy the steps keep the device depends on the host's load, so the check is relative: the same
    # rows read as one trial, the pause inside it, read less busy
    assert steps["gpu_busy_step_spans"] == pytest.approx(gpu_busy_step_spans(rows))
    as_one_trial = [{**row, "trial": 0} for row in rows]
    assert steps["gpu_busy_step_spans"] > gpu_busy_step_spans(as_one_trial)
    assert steps["max_gpu_idle_gap_ms"] < 200  # the pause is no gap of a trial


def test_step_records_are_drained_while_a_step_is_on_the_device(tmp_path):
    """steps.csv's batches are the client's work, done in poll's wait: only the drains that end a
    phase run between steps, and every step is still written once."""

    class Watching(BundledBackend):
        def __init__(self):
            self.waiting, self.drained_while_waiting = False, []

        def poll(self, while_waiting=None):
            def flagged():
                self.waiting = True
                try:
                    while_waiting()
                finally:
                    self.waiting = False

            return super().poll(flagged if while_waiting is not None else None)

        def drain_step_records(self):
            self.drained_while_waiting.append(self.waiting)
            return super().drain_step_records()

    # simulated 20 ms forwards over ~40 steps a trial: several flush intervals (0.1 s) pass mid-trial
    overrides = {"model.null_forward_ms": 20, "workload.output.min": 30, "workload.output.max": 40}
    config, backend = start(Watching(), **overrides)
    run_benchmark(config, tmp_path, backend=backend)
    drains = backend.drained_while_waiting
    assert drains.count(False) == 2  # after the warm-up (discarded) and at the trial's end
    assert drains.count(True) >= 3
    steps = [row["step"] for row in load_steps(tmp_path)]
    assert steps == list(range(steps[0], steps[0] + len(steps)))
