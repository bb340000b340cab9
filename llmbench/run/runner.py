"""Drive a backend with a workload on the wall clock and record what the client sees: the warm-up, then
each timed trial as a phase (llmbench/run/phase.py), with the GPU and the server's metrics watched over
the trials; then summary.json, written also when a run is interrupted or stopped (marked incomplete),
since every request's row went to disk as it finished."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from llmbench.backends.base import Backend
from llmbench.backends.cache_reset import reset_prefix_cache, root_of
from llmbench.backends.factory import make_backend
from llmbench.backends.openai_request import auth_headers
from llmbench.backends.server_profile import ServerProfiler
from llmbench.config.schema import RunConfig
from llmbench.device.ceilings import run_ceilings, run_clock_sampler
from llmbench.device.environment import collect_environment
from llmbench.engine.core.gc_heap import freeze_heap
from llmbench.metrics.client import client_summary
from llmbench.metrics.models import per_model_metrics
from llmbench.metrics.requests import compute_metrics
from llmbench.metrics.roofline import with_bound
from llmbench.metrics.steps import summarize_steps
from llmbench.metrics.turns import per_turn_metrics
from llmbench.profiling.window import STEP_HOOK, window_from_env
from llmbench.results.metrics import Metrics
from llmbench.results.summary import RunSummary
from llmbench.run.phase import RunState, RunStopped, run_phase
from llmbench.run.plan import Workload, build_workload
from llmbench.run.prefix_cache import reset_url, trial_cache
from llmbench.run.progress import Progress
from llmbench.run.result_files import ResultWriter
from llmbench.run.signals import interrupt_name
from llmbench.run.step_rows import StepRows
from llmbench.run.summary import build_summary, nothing_completed
from llmbench.run.telemetry import Telemetry

logger = logging.getLogger(__name__)


@dataclass
class RunResult:
    run_dir: Path
    summary: RunSummary
    interrupted: bool = False
    stopped: str | None = None  # why the run stopped early (output.max_error_rate)


def run_benchmark(
    config: RunConfig,
    run_dir: Path,
    repeat: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    check: bool = False,
    replace: bool = False,
) -> RunResult:
    """Run the warm-up, then `repeat` timed trials. Trial k uses workload seed + k, so trials are
    independent samples and none finds an identical earlier trial in the prefix cache. With `check`,
    a finished run asserts that the backend holds no request and no KV block (AssertionError).
    `replace`: an earlier run's files in run_dir are removed, else they are a RunDirError."""
    backend = backend or make_backend(config, STEP_HOOK)
    try:
        # trial 0 is built first, so a workload the model cannot serve fails before anything is written;
        # the others one at a time, so only one trial's prompts are in memory
        first = build_workload(config, backend.model_info)
        workloads = (
            first if k == 0 else build_workload(config, backend.model_info, k) for k in range(repeat)
        )
        reset = reset_url(config, backend)  # the preflight made sure the server takes it
        profiler = ServerProfiler(root_of(config, backend)) if config.backend.profile_server else None
        clocks = run_clock_sampler(config)  # the GPU's SM clock over the ceilings' GEMM, then the trials
        ceilings = run_ceilings(config, clocks)  # before the first request: the device is idle
        freeze_heap()  # as the engine core and the server do: the engines compared pay the same GC
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        run_start = time.perf_counter()
        config_dict = config.to_dict()
        writer = ResultWriter(run_dir, config_dict, run_start, config.output.save_tokens, replace)
        window = None if backend.profiles_own_steps else window_from_env()
        steps = StepRows(backend, writer)
        telemetry = Telemetry(config, backend, clocks, run_start)
        state = RunState(
            backend, writer, config, progress, run_start, steps, window=window, telemetry=telemetry
        )
        trial_metrics: list[Metrics] = []
        warnings: list[str] = []
        complete = False
        stopped = interrupted = None  # what stopped the run early, said in stop_reason
        try:
            _run_trials(state, first, workloads, repeat, trial_metrics, warnings, reset, profiler)
            complete = True
            stopped = nothing_completed(trial_metrics)
            if stopped:
                logger.error("run failed: %s", stopped)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM under the CLI (llmbench/run/signals.py)
            interrupted = interrupt_name(e)
            logger.warning("interrupted (%s): writing partial results", interrupted)
        except RunStopped as e:
            stopped = str(e)
            logger.error("stopped: %s", stopped)
        finally:
            if state.window is not None:
                state.window.close()
            if profiler is not None:  # the server's window ends with the trials, a stop's included
                profiler.stop(auth_headers(config.backend.api_key_env))
            # the step log's figures, then the bound's and the GPU's added to them
            step_summary = summarize_steps(state.steps.rows, config_dict)
            step_summary = with_bound(step_summary, state.steps.rows, config_dict, ceilings, trial_metrics)
            summary = build_summary(
                name=config.name,
                complete=complete,
                started_at=started_at,
                config=config_dict,
                environment=collect_environment(),
                trials=trial_metrics,
                steps=telemetry.with_gpu_figures(step_summary, trial_metrics),
            )
            telemetry.finish(summary, run_dir)
            summary.client = client_summary(
                state.records,
                backend.client_usage(),
                config.backend.client_lag_bound_ms,
                config.workload.max_concurrency,
            )
            if config.workload.session.turns > 1:
                summary.turns = per_turn_metrics(state.records, config.output.percentiles, config.slo)
            if config.backend.models:
                names = [m.name for m in config.backend.models]
                summary.models = per_model_metrics(
                    state.records, names, config.output.percentiles, config.slo
                )
            samples = state.samples.texts(config)
            if samples:
                summary.samples = samples
            if backend.served_model is not None:
                summary.served_model = backend.served_model
            if profiler is not None:
                summary.server_profile = profiler.summary()
            if warnings:
                summary.warnings = warnings
            if stopped:
                summary.stop_reason = stopped
            elif interrupted:
                unstarted = f"{state.not_started} request{'' if state.not_started == 1 else 's'}"
                summary.stop_reason = f"interrupted ({interrupted}); {unstarted} not started"
            writer.write_summary(summary)
            writer.close()
        if check and complete:
            backend.check_empty()
        return RunResult(Path(run_dir), summary, bool(interrupted), stopped)
    finally:
        backend.close()


def _run_trials(
    state: RunState,
    first: Workload,
    workloads: Iterable[Workload],
    repeat: int,
    trial_metrics: list[Metrics],
    warnings: list[str],
    reset: str | None,
    profiler: ServerProfiler | None,
) -> None:
    """Appends each trial's metrics as it ends, partial trials included, and what each trial's figures
    should be read with to `warnings`; `reset`: the server whose prefix cache each trial starts by
    emptying; `profiler`: the server's, started once the warm-up is done (run_benchmark stops it)."""
    if first.warmup:
        run_phase(state, first.warmup, trial=0, warmup=True, label="warm-up")
        state.backend.drain_step_records()  # warm-up steps are not part of the measurement
    if profiler is not None:
        profiler.start(auth_headers(state.config.backend.api_key_env))
    for k, workload in enumerate(workloads):
        start = len(state.records)
        if reset is not None:
            reset_prefix_cache(reset, auth_headers(state.config.backend.api_key_env))
        try:
            with state.telemetry or contextlib.nullcontext():
                run_phase(state, workload.requests, trial=k, warmup=False, label=f"trial {k + 1}/{repeat}")
        finally:
            metrics = compute_metrics(
                state.records[start:], state.config.output.percentiles, state.config.slo
            )
            # requests a Ctrl-C or a stop cut off before their first token are neither done nor failed
            metrics.not_started = state.not_started
            cache = trial_cache(k, state.records[start:], state.prefixes)
            metrics.cached_prompt_tokens = cache.cached_prompt_tokens
            metrics.warm_cache_requests = cache.warm_cache_requests
            if cache.warning:
                warnings.append(cache.warning)
                logger.warning(cache.warning)
            trial_metrics.append(metrics)
