"""Failure accounting: a request that errors, is rejected or times out is counted in `failed`, kept in
requests.jsonl with its error and left out of the latency statistics; the run still writes its results.
Also the early stop on output.max_error_rate and the --check leak check."""

import time

import pytest
from llmbench.engine.request import SamplingParams
from typer.testing import CliRunner

import llmbench.backends.factory
import llmbench.profiling.window
from llmbench.backends.bundled import BundledBackend
from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.metrics.requests import compute_metrics
from llmbench.profiling.steps import StepRange
from llmbench.profiling.window import STEP_HOOK, ProfileWindow
from llmbench.results.files import load_steps
from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark
from tests.llmbench.null_run import NULL_RUN

# 2 blocks of 16 tokens: any request needing more than 33 tokens is rejected by the engine
SMALL_POOL = ["engine.num_gpu_blocks=2", "engine.block_size=16"]


def run_cli(config_file, out, *args: str):
    return CliRunner().invoke(app, ["run", str(config_file), "--out", str(out), "--no-report", *args])


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


class SlowBackend(BundledBackend):
    """Each engine step takes at least `step_s`, as a real forward would."""

    def __init__(self, step_s: float, step_hook: str | None = None):
        super().__init__(step_hook)
        self.step_s = step_s

    def poll(self, while_waiting=None):
        time.sleep(self.step_s)
        return super().poll(while_waiting)


class GhostBackend(BundledBackend):
    """Adds one long request behind the runner's back: the engine is not empty when the run ends."""

    def submit(self, request_id, prompt_token_ids, params, due=None, model=None):
        if not hasattr(self, "ghost"):
            self.ghost = True
            self.engine.add_request("ghost", [5, 6, 7], SamplingParams(max_tokens=1000, ignore_eos=True))
        super().submit(request_id, prompt_token_ids, params, due, model)


def started(backend, overrides: list[str]):
    config = parse_config(NULL_RUN, overrides)
    backend.start(config)
    return config, backend


def test_rejected_requests_count_as_failed_and_stay_out_of_latencies(tmp_path, null_config_file):
    out = tmp_path / "r"
    result = run_cli(null_config_file, out, *sets(SMALL_POOL + ["workload.num_requests=30"]))
    assert result.exit_code == 0, result.output
    summary = RunSummary.load(out).to_dict()
    rows = [r for r in load_requests(out) if not r.warmup]
    rejected = [r for r in rows if r.finish_reason == "rejected"]
    done = [r for r in rows if r.finish_reason == "length"]
    assert len(rows) == 30 and len(rejected) + len(done) == 30
    assert rejected and done, "the pool is sized so that some requests fit and some do not"
    assert all("KV blocks" in r.error and r.output_len == 0 for r in rejected)
    assert all(r.prompt_len + r.output_len - 1 <= 32 for r in done)
    metrics = summary["metrics"]
    assert summary["complete"] is True
    assert (metrics["completed"], metrics["failed"]) == (len(done), len(rejected))
    # the statistics are those of the finished requests alone
    alone = compute_metrics(done, [50, 90, 95, 99])
    for key in ("mean_ttft_ms", "p99_e2el_ms", "mean_itl_ms", "total_output_tokens", "duration_s"):
        assert metrics[key] == pytest.approx(alone.value(key))


def test_timed_out_requests_are_aborted_and_counted_as_failed(tmp_path):
    # 8 run at once, each through 8-9 steps of >= 50 ms: the second wave cannot finish before 0.8 s, past
    # the timeout whatever the machine; the first has 200 ms to spare for a loaded machine's overhead
    timeout, step_s = 0.65, 0.05
    overrides = ["workload.num_requests=16", "workload.output={dist: fixed, mean: 8}"]
    overrides += [f"workload.request_timeout_s={timeout}", "workload.warmup_requests=0"]
    config, backend = started(SlowBackend(step_s), overrides)
    result = run_benchmark(config, tmp_path, backend=backend, check=True)  # aborted work must not leak
    rows = [r for r in load_requests(tmp_path) if not r.warmup]
    timed_out = [r for r in rows if r.finish_reason == "timeout"]
    done = [r for r in rows if r.finish_reason == "length"]
    assert len(timed_out) + len(done) == 16
    assert len(timed_out) == len(done) == 8
    assert all("request_timeout_s=0.65" in r.error and r.output_len < 8 for r in timed_out)
    # a request finishing in the poll that passes its deadline is done: it may end a step late
    assert all(r.token_times[-1] - r.submit_time < timeout + 2 * step_s for r in done)
    metrics = result.summary.to_dict()["metrics"]
    assert result.summary.to_dict()["complete"] is True
    assert (metrics["completed"], metrics["failed"]) == (len(done), len(timed_out))
    assert metrics["timed_out"] == 8 and metrics["cancelled"] == 0  # a failure kind of its own
    assert metrics["max_e2el_ms"] < (timeout + 2 * step_s) * 1000


def test_profile_window_counts_the_steps_that_drain_timed_out_requests(tmp_path, monkeypatch):
    # `--steps A:B` is in steps.csv's numbering: the steps that clear aborted requests count too
    window = ProfileWindow("nsys", StepRange(10**6), tmp_path)  # never opens
    monkeypatch.setattr(llmbench.profiling.window, "window_from_env", lambda: window)  # the engine's hook
    overrides = [
        "workload.warmup_requests=0",
        "workload.num_requests=16",
        "workload.output={dist: fixed, mean: 20}",
    ]
    config, backend = started(
        SlowBackend(step_s=0.005, step_hook=STEP_HOOK), overrides + ["workload.request_timeout_s=0.16"]
    )
    run_benchmark(config, tmp_path, backend=backend)
    assert any(r.finish_reason == "timeout" for r in load_requests(tmp_path))
    assert window.next_step == load_steps(tmp_path)[-1]["step"] + 1


def test_max_error_rate_stops_the_run_and_keeps_its_results(tmp_path, null_config_file):
    out = tmp_path / "r"
    overrides = SMALL_POOL + ["workload.num_requests=40", "output.max_error_rate=0.1"]
    result = run_cli(null_config_file, out, *sets(overrides))
    assert result.exit_code == 1
    summary = RunSummary.load(out).to_dict()
    assert summary["complete"] is False
    assert "over output.max_error_rate=0.1" in summary["stop_reason"]
    rows = [r for r in load_requests(out) if not r.warmup]
    failed = [r for r in rows if r.finish_reason == "rejected"]
    unfinished = [r for r in rows if r.finish_reason is None]
    # past 10% of 40 the run stops, and requests still in flight are written unfinished
    assert len(failed) > 4 and unfinished
    assert summary["metrics"]["failed"] == len(rows) - summary["metrics"]["completed"]


def test_max_error_rate_above_the_failures_lets_the_run_finish(tmp_path, null_config_file):
    out = tmp_path / "r"
    result = run_cli(null_config_file, out, *sets(SMALL_POOL + ["output.max_error_rate=1"]))
    assert result.exit_code == 0, result.output
    assert RunSummary.load(out).to_dict()["complete"] is True


@pytest.mark.parametrize("overrides", [[], ["engine.process_split=true"]], ids=["in-process", "split"])
def test_check_passes_on_a_clean_run(tmp_path, null_config_file, overrides):
    result = run_cli(null_config_file, tmp_path / "r", "--check", *sets(overrides))
    assert result.exit_code == 0, result.output
    assert RunSummary.load(tmp_path / "r").to_dict()["complete"] is True


def test_check_fails_when_the_engine_keeps_work(tmp_path, monkeypatch, null_config_file):
    config, backend = started(GhostBackend(), [])
    with pytest.raises(AssertionError, match="running"):
        run_benchmark(config, tmp_path / "direct", backend=backend, check=True)
    monkeypatch.setattr(
        llmbench.backends.factory, "make_backend", lambda c, hook: started(GhostBackend(), [])[1]
    )
    result = run_cli(null_config_file, tmp_path / "cli", "--check")
    assert result.exit_code == 1
    # the results were written before the check
    assert RunSummary.load(tmp_path / "cli").to_dict()["complete"] is True
    assert run_cli(null_config_file, tmp_path / "unchecked").exit_code == 0


def test_hf_backend_drops_an_aborted_request_that_is_still_queued():
    pytest.importorskip("transformers")
    from llmbench.backends.hf import HFBackend

    config, backend = started(HFBackend(), ["backend.type=hf", "backend.batch_size=1"])
    try:
        params = SamplingParams(max_tokens=3, ignore_eos=True)
        for request_id in ("a", "b", "c"):
            backend.submit(request_id, [5, 6, 7], params)
        backend.abort("c")  # nothing runs before the first poll: "c" is still queued
        backend.abort("unknown")
        finished = []
        while backend.has_unfinished():
            finished += [o.request_id for o in backend.poll() if o.finished]
        assert sorted(finished) == ["a", "b"]
        backend.check_empty()
    finally:
        backend.close()


def test_a_run_in_which_every_request_failed_exits_1_with_its_reason(tmp_path, null_config_file):
    out = tmp_path / "r"
    # 2 blocks of 16 tokens hold no request of 40 prompt tokens or more: every one is rejected
    overrides = SMALL_POOL + ["workload.input={dist: fixed, mean: 40}", "workload.warmup_requests=0"]
    result = run_cli(null_config_file, out, *sets(overrides))
    assert result.exit_code == 1, result.output
    summary = RunSummary.load(out).to_dict()
    assert summary["complete"] is True
    assert (summary["metrics"]["completed"], summary["metrics"]["failed"]) == (0, 12)
    assert (
        summary["stop_reason"] == "no request completed (12 failed; see the error column of requests.jsonl)"
    )


def test_progress_counts_only_the_tokens_of_completed_requests():
    from llmbench.cli.console import RunProgress
    from llmbench.results.records import RequestRecord

    progress = RunProgress()
    progress.phase("trial 1/1", total=2)
    progress.request_done(RequestRecord("a", 0, False, 4, output_len=50, finish_reason="timeout"))
    assert progress._output_tokens == 0
    progress.request_done(RequestRecord("b", 0, False, 4, output_len=7, finish_reason="length"))
    assert progress._output_tokens == 7
