"""Drive a backend with a workload on the wall clock and record what the client sees.

Requests are submitted at their arrival times (within max_concurrency), the backend is polled, and
every output's arrival is stamped with perf_counter when poll() hands it over (its row takes it during
the next poll, unless it finishes its request). Rows go to disk as they finish, so Ctrl-C or a crash
still leaves a run directory, with summary.json marked incomplete."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmbench.backends.base import Backend
from llmbench.backends.factory import make_backend
from llmbench.config.schema import RunConfig
from llmbench.device.ceilings import run_ceilings, run_clock_sampler
from llmbench.device.environment import collect_environment
from llmbench.engine.gc_heap import freeze_heap
from llmbench.engine.request import RequestOutput
from llmbench.metrics.client import client_summary
from llmbench.metrics.requests import compute_metrics
from llmbench.metrics.roofline import bound_summary
from llmbench.metrics.steps import summarize_steps
from llmbench.metrics.turns import per_turn_metrics
from llmbench.profiling.window import ProfileWindow, window_from_env
from llmbench.run.plan import Workload, build_workload
from llmbench.run.recorder import DeferredOutputs, new_record, sampling_params
from llmbench.run.records import RequestRecord
from llmbench.run.result_files import ResultWriter
from llmbench.run.samples import SampleCatcher
from llmbench.run.sessions import Sessions
from llmbench.run.signals import interrupt_name
from llmbench.run.step_rows import StepRows
from llmbench.run.summary import build_summary, nothing_completed
from llmbench.run.telemetry import Telemetry
from llmbench.run.workload import WorkloadRequest

if TYPE_CHECKING:
    from llmbench.cli.console import RunProgress

logger = logging.getLogger(__name__)


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    interrupted: bool = False
    stopped: str | None = None  # why the run stopped early (output.max_error_rate)


class RunStopped(RuntimeError):
    """A trial's failures passed output.max_error_rate: the run stops, keeping what it measured."""


@dataclass
class _RunState:
    """What the phases of one run share: the backend, where rows go, and what was measured."""

    backend: Backend
    writer: ResultWriter
    config: RunConfig
    progress: RunProgress | None
    run_start: float
    steps: StepRows
    records: list[RequestRecord] = field(default_factory=list)
    window: ProfileWindow | None = None  # under `llmbench profile`: starts and stops the profiler
    not_started: int = 0  # of the current phase: requests without a token when it was cut short
    telemetry: Telemetry | None = None  # the GPU and the server's /metrics during timed trials
    samples: SampleCatcher = field(default_factory=SampleCatcher)  # a few completions, for the report


def run_benchmark(
    config: RunConfig,
    run_dir: Path,
    repeat: int = 1,
    backend: Backend | None = None,
    progress: RunProgress | None = None,
    check: bool = False,
    replace: bool = False,
) -> RunResult:
    """Run the warm-up, then `repeat` timed trials. Trial k uses workload seed + k, so trials are
    independent samples and none finds an identical earlier trial in the prefix cache. With `check`,
    a finished run asserts that the backend holds no request and no KV block (AssertionError).
    `replace`: an earlier run's files in run_dir are removed, else they are a RunDirError."""
    backend = backend or make_backend(config)
    try:
        # trial 0 is built first, so a workload the model cannot serve fails before anything is written;
        # the others one at a time, so only one trial's prompts are in memory
        first = build_workload(config, backend.model_info)
        workloads = (
            first if k == 0 else build_workload(config, backend.model_info, k) for k in range(repeat)
        )
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
        state = _RunState(
            backend, writer, config, progress, run_start, steps, window=window, telemetry=telemetry
        )
        trial_metrics: list[dict[str, Any]] = []
        complete = False
        stopped = interrupted = None  # what stopped the run early, said in stop_reason
        try:
            _run_trials(state, first, workloads, repeat, trial_metrics)
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
            summary = build_summary(
                name=config.name,
                complete=complete,
                started_at=started_at,
                config=config_dict,
                environment=collect_environment(),
                trials=trial_metrics,
                steps=summarize_steps(state.steps.rows, config_dict)
                | bound_summary(state.steps.rows, config_dict, ceilings, trial_metrics)
                | telemetry.steps_summary(trial_metrics),
            )
            telemetry.finish(summary, run_dir)
            summary["client"] = client_summary(
                state.records,
                backend.client_usage(),
                config.backend.client_lag_bound_ms,
                config.workload.max_concurrency,
            )
            if config.workload.session.turns > 1:
                summary["turns"] = per_turn_metrics(state.records, config.output.percentiles, config.slo)
            samples = state.samples.texts(config)
            if samples:
                summary["samples"] = samples
            if stopped:
                summary["stop_reason"] = stopped
            elif interrupted:
                unstarted = f"{state.not_started} request{'' if state.not_started == 1 else 's'}"
                summary["stop_reason"] = f"interrupted ({interrupted}); {unstarted} not started"
            writer.write_summary(summary)
            writer.close()
        if check and complete:
            backend.check_empty()
        return RunResult(Path(run_dir), summary, bool(interrupted), stopped)
    finally:
        backend.close()


def _run_trials(
    state: _RunState,
    first: Workload,
    workloads: Iterable[Workload],
    repeat: int,
    trial_metrics: list[dict[str, Any]],
) -> None:
    """Appends each trial's metrics as it ends, partial trials included."""
    if first.warmup:
        _run_phase(state, first.warmup, trial=0, warmup=True, label="warm-up")
        state.backend.drain_step_records()  # warm-up steps are not part of the measurement
    for k, workload in enumerate(workloads):
        start = len(state.records)
        try:
            with state.telemetry or contextlib.nullcontext():
                _run_phase(state, workload.requests, trial=k, warmup=False, label=f"trial {k + 1}/{repeat}")
        finally:
            metrics = compute_metrics(
                state.records[start:], state.config.output.percentiles, state.config.slo
            )
            # requests a Ctrl-C or a stop cut off before their first token are neither done nor failed
            metrics["not_started"] = state.not_started
            trial_metrics.append(metrics)


def _run_phase(
    state: _RunState, requests: list[WorkloadRequest] | Sessions, trial: int, warmup: bool, label: str
) -> None:
    limit = state.config.workload.max_concurrency
    # a backend that keeps the concurrency itself is handed as many again, so that its loop has the
    # next request at hand when a stream ends: fixed lengths end a whole window's streams together
    keeps = state.backend.keeps_concurrency
    window = None if limit is None else 2 * limit if keeps else limit
    timeout = state.config.workload.request_timeout_s
    save_tokens = state.config.output.save_tokens
    max_error_rate = None if warmup else state.config.output.max_error_rate
    failed = aborted = 0
    # sessions: a turn's successor is queued when it finishes, its prompt holding this turn's answer
    sessions = isinstance(requests, Sessions)
    pending = requests.queue() if sessions else deque(requests)
    live: dict[str, RequestRecord] = {}  # by backend request id
    deferred = DeferredOutputs(live, state.run_start, state.backend.stamps_outputs, save_tokens or sessions)
    state.not_started = 0
    sampled_phase = trial == 0 and not warmup
    if state.progress:
        state.progress.phase(label, len(requests))
    phase_start = time.perf_counter()

    def while_waiting() -> None:  # the client's work, while an in-process engine's step is on the device
        deferred.record()
        if not warmup:
            state.steps.flush_if_due(trial)

    # when a full concurrency window last opened a slot: a request that waited for it counts from then
    slot_opened = -math.inf
    try:
        while pending or live:
            now = time.perf_counter()
            handed = 0  # a window's worth a pass: the first window is sent before more are prepared
            while pending and now >= phase_start + pending[0].arrival_time:
                if window is not None and (len(live) >= window or handed >= limit):
                    break
                handed += 1
                request = pending.popleft()
                due = phase_start + request.arrival_time
                backend_id = f"{trial}:{request.request_id}"
                if keeps:  # its submit time comes with its first output (not timed out before: inf)
                    live[backend_id] = _submit(state, backend_id, request, trial, warmup, math.inf, due)
                else:
                    # an in-process engine blocks this loop during a step; a request due meanwhile is
                    # stamped at its due time, as a server would have received it then
                    submit = max(due, slot_opened)
                    live[backend_id] = _submit(state, backend_id, request, trial, warmup, submit)
                if sampled_phase:
                    state.samples.want(backend_id, request.prompt_token_ids, request.prompt)
            if not live:
                time.sleep(max(0.0, phase_start + pending[0].arrival_time - time.perf_counter()))
                continue
            was_full = limit is not None and len(live) >= limit
            outputs = _poll(state, while_waiting)
            arrival = time.perf_counter()
            if state.samples.waiting:
                state.samples.look(outputs)
            finished = deferred.add(outputs, arrival)
            if finished:
                _finish(state, finished)
                failed += sum(not record.succeeded for record in finished)
                if sessions:
                    pending.finished(finished, arrival - phase_start, release=not save_tokens)
            if timeout is not None:
                overdue = _abort_overdue(state, deferred, arrival - state.run_start - timeout, timeout)
                failed += overdue
                aborted += overdue
            if max_error_rate is not None and failed > max_error_rate * len(requests):
                raise RunStopped(
                    f"{label}: {failed} of {len(requests)} requests failed, over "
                    f"output.max_error_rate={max_error_rate:g}"
                )
            if was_full and len(live) < limit:
                slot_opened = arrival
        if aborted:
            _drain(state)
        _flush_steps(state, trial, warmup)
    except BaseException:
        # keep what the unfinished requests got so far (their finish_reason stays None); one that got
        # no token yet, like one never submitted, did not start: it is counted, not recorded
        deferred.record()
        started = [record for record in live.values() if record.output_len]
        state.not_started = len(pending) + len(live) - len(started)
        _finish(state, started)
        _flush_steps(state, trial, warmup)
        raise


def _submit(
    state: _RunState,
    backend_id: str,
    request: WorkloadRequest,
    trial: int,
    warmup: bool,
    submit_time: float,
    due: float | None = None,
) -> RequestRecord:
    """`due`: for a backend that keeps the concurrency, when the schedule has the request start."""
    config = state.config
    record = new_record(request, trial, warmup, submit_time - state.run_start, config.output.save_tokens)
    params = sampling_params(request, config.workload)
    if due is None:
        state.backend.submit(backend_id, request.prompt_token_ids, params)
    else:
        state.backend.submit(backend_id, request.prompt_token_ids, params, due)
    return record


def _abort_overdue(state: _RunState, deferred: DeferredOutputs, cutoff: float, timeout: float) -> int:
    """Abort and record as failed every live request submitted before `cutoff` (run-relative)."""
    live = deferred.live
    overdue = [backend_id for backend_id, record in live.items() if record.submit_time < cutoff]
    if overdue:
        deferred.record()  # their tokens so far, before their rows are written
    records = []
    for backend_id in overdue:
        state.backend.abort(backend_id)
        record = live.pop(backend_id)
        record.finish_reason = "timeout"
        record.error = f"not finished within workload.request_timeout_s={timeout:g}"
        records.append(record)
    _finish(state, records)
    return len(overdue)


def _poll(state: _RunState, while_waiting: Callable[[], object] | None = None) -> Iterable[RequestOutput]:
    """One engine step (in-process), counted by the profile window like every other step."""
    if state.window is not None:
        state.window.before_step()
    return state.backend.poll(while_waiting)


def _drain(state: _RunState) -> None:
    """Step until timed-out requests have left the backend, so the next phase starts from an empty one."""
    while state.backend.has_unfinished():
        _poll(state)


def _finish(state: _RunState, records: list[RequestRecord]) -> None:
    """Requests that ended together: their rows to disk in one write, then counted."""
    if not records:
        return
    now = time.perf_counter() - state.run_start
    for record in records:
        if record.finish_time is None:  # aborted, or cut off by a stop: it ends now
            record.finish_time = now
    state.writer.add_requests(records)
    state.records.extend(records)
    if state.progress:
        for record in records:
            state.progress.request_done(record)


def _flush_steps(state: _RunState, trial: int, warmup: bool) -> None:
    if not warmup:
        state.steps.flush(trial)
