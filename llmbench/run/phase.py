"""One phase of a run, the warm-up or a timed trial: its requests submitted at their arrival times
(within max_concurrency, or handed ahead to a backend that keeps it itself), the backend polled, every
output stamped when poll() hands it over, and each request's row written as it finishes, so an
interrupted phase still leaves its rows on disk."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from llmbench.backends.base import Backend
from llmbench.config.schema import HTTP_BACKENDS, RunConfig
from llmbench.engine.request import RequestOutput
from llmbench.profiling.window import ProfileWindow
from llmbench.results.records import CANCELLED, RequestRecord
from llmbench.run.cancel import Cancels
from llmbench.run.model_mix import ModelMix
from llmbench.run.prefix_cache import PrefixIndex
from llmbench.run.progress import Progress
from llmbench.run.recorder import DeferredOutputs, new_record, sampling_params
from llmbench.run.result_files import ResultWriter
from llmbench.run.samples import SampleCatcher
from llmbench.run.sessions import Sessions
from llmbench.run.step_rows import StepRows
from llmbench.run.telemetry import Telemetry
from llmbench.run.workload import WorkloadRequest


class RunStopped(RuntimeError):
    """A trial's failures passed output.max_error_rate: the run stops, keeping what it measured."""


@dataclass
class RunState:
    """What the phases of one run share: the backend, where rows go, and what was measured."""

    backend: Backend
    writer: ResultWriter
    config: RunConfig
    progress: Progress | None
    run_start: float
    steps: StepRows
    records: list[RequestRecord] = field(default_factory=list)
    window: ProfileWindow | None = None  # under `llmbench profile`: starts and stops the profiler
    not_started: int = 0  # of the current phase: requests without a token when it was cut short
    telemetry: Telemetry | None = None  # the GPU and the server's /metrics during timed trials
    samples: SampleCatcher = field(default_factory=SampleCatcher)  # a few completions, for the report
    # the current phase's prompts so far, where a server may report cached tokens (HTTP backends): ~80 us
    # a 1,024-token prompt, which an in-process run would pay for nothing
    prefixes: PrefixIndex | None = None
    models: ModelMix | None = None  # the current phase's pick of backend.models, where set


def run_phase(
    state: RunState, requests: list[WorkloadRequest] | Sessions, trial: int, warmup: bool, label: str
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
    cancel = state.config.workload.cancel
    cancels = Cancels(cancel, state.config.workload.seed, trial) if cancel.rate and not warmup else None
    hang_ups: dict[str, RequestRecord] = {}  # live requests the client will cancel, by backend id
    deferred = DeferredOutputs(live, state.run_start, state.backend.stamps_outputs, save_tokens or sessions)
    state.not_started = 0
    state.prefixes = PrefixIndex() if state.config.backend.type in HTTP_BACKENDS else None
    models = state.config.backend.models
    state.models = ModelMix(models, state.config.workload.seed, trial) if models else None
    sampled_phase = trial == 0 and not warmup
    if state.progress:
        state.progress.phase(label, len(requests))
    # a backend whose loop starts each request at its due time is handed it that much ahead: a burst
    # due at once (a closed loop's first window) is prepared before its time, not while it is late
    ahead = state.backend.hands_ahead_s
    phase_start = time.perf_counter() + ahead

    # rows of finished requests, written once the requests their slots free are handed over and sent:
    # writing a closed loop's window of 512 rows came first, and the next window waited for it as
    # schedule lag
    unwritten: list[RequestRecord] = []

    def write_rows() -> None:
        rows = unwritten[:]
        unwritten.clear()
        _finish(state, rows)

    def while_waiting() -> None:  # the client's work, while an in-process engine's step is on the device
        # or once an HTTP client has sent the starts it held: written before the poll, a window's rows
        # held the window's last starts back for as long as they took
        write_rows()
        deferred.record()
        if not warmup:
            state.steps.flush_if_due(trial)

    # when a full concurrency window last opened a slot: a request that waited for it counts from then
    slot_opened = -math.inf
    try:
        while pending or live:
            now = time.perf_counter()
            handed = 0  # a window's worth a pass: the first window is sent before more are prepared
            while pending and now + ahead >= phase_start + pending[0].arrival_time:
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
                    live[backend_id] = _submit(state, backend_id, request, trial, warmup, submit, submit)
                if cancels is not None and cancels.chosen(request.request_id):
                    hang_ups[backend_id] = live[backend_id]
                if sampled_phase:
                    state.samples.want(backend_id, request.prompt_token_ids, request.prompt)
            if not live:
                write_rows()
                time.sleep(max(0.0, phase_start + pending[0].arrival_time - ahead - time.perf_counter()))
                continue
            was_full = limit is not None and len(live) >= limit
            outputs = _poll(state, while_waiting)
            arrival = time.perf_counter()
            write_rows()  # where the backend did not call while_waiting
            if state.samples.waiting:
                state.samples.look(outputs)
            finished = deferred.add(outputs, arrival)
            if finished:
                unwritten += finished
                failed += sum(not record.succeeded for record in finished)
                if sessions:
                    pending.finished(finished, arrival - phase_start, release=not save_tokens)
            if hang_ups:
                aborted += _hang_up(state, deferred, hang_ups, cancels, arrival - state.run_start)
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
        _finish(state, unwritten)
        if aborted:
            _drain(state)
        _flush_steps(state, trial, warmup)
    except BaseException:
        # keep what the unfinished requests got so far (their finish_reason stays None); one that got
        # no token yet, like one never submitted, did not start: it is counted, not recorded
        deferred.record()
        started = [record for record in live.values() if record.output_len]
        state.not_started = len(pending) + len(live) - len(started)
        _finish(state, unwritten + started)
        _flush_steps(state, trial, warmup)
        raise


def _submit(
    state: RunState,
    backend_id: str,
    request: WorkloadRequest,
    trial: int,
    warmup: bool,
    submit_time: float,
    due: float,
) -> RequestRecord:
    """`due`: when the request counts as submitted; a backend that keeps the concurrency starts it
    then or once a slot opens, and its first output says which (submit_time is inf until then)."""
    config = state.config
    record = new_record(request, trial, warmup, submit_time - state.run_start, config.output.save_tokens)
    params = sampling_params(request, config.workload)
    if state.prefixes is not None:
        state.prefixes.add(request.request_id, request.prompt_token_ids)
    if state.models is not None:
        record.model = state.models.pick(request.request_id, request.session)
    state.backend.submit(backend_id, request.prompt_token_ids, params, due, record.model)
    return record


def _abort_overdue(state: RunState, deferred: DeferredOutputs, cutoff: float, timeout: float) -> int:
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


def _hang_up(
    state: RunState,
    deferred: DeferredOutputs,
    hang_ups: dict[str, RequestRecord],
    cancels: Cancels,
    now: float,
) -> int:
    """Cancel the chosen requests whose moment has come (`now`, run-relative): the client closes their
    streams, and their rows end as cancelled, not failed. Returns how many."""
    deferred.record()  # their tokens so far: the count decides, and goes into the rows
    live = deferred.live
    for backend_id in [b for b in hang_ups if b not in live]:
        del hang_ups[backend_id]  # finished before its moment
    due = [backend_id for backend_id, record in hang_ups.items() if cancels.due(record, now)]
    records = []
    for backend_id in due:
        state.backend.abort(backend_id)
        del hang_ups[backend_id]
        record = live.pop(backend_id)
        record.finish_reason = CANCELLED
        records.append(record)
    _finish(state, records)
    return len(due)


def _poll(state: RunState, while_waiting: Callable[[], object] | None = None) -> Iterable[RequestOutput]:
    """One engine step (in-process), counted by the profile window like every other step."""
    if state.window is not None:
        state.window.before_step()
    return state.backend.poll(while_waiting)


def _drain(state: RunState) -> None:
    """Step until timed-out and cancelled requests have left the backend, so the next phase starts from
    an empty one."""
    while state.backend.has_unfinished():
        _poll(state)


def _finish(state: RunState, records: list[RequestRecord]) -> None:
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


def _flush_steps(state: RunState, trial: int, warmup: bool) -> None:
    if not warmup:
        state.steps.flush(trial)
