"""summary.json's `client` block: the benchmark client's own overhead budget, and whether it limited the run.

Every latency of an HTTP run is a difference of two of the client's stamps, so a client that falls behind
(its loop late, its core full) inflates them unnoticed. The block says how late it was and how busy:
- schedule lag: when the client's loop began each timed request minus when the schedule meant it to
  (send_start_time - submit_time in requests.jsonl), p50/p99/max in ms;
- event-loop lag and CPU use of each stream loop (backends/loop_monitor.py), measured while a stream
  was in flight;
- the concurrency reached: the most requests in flight at once (from their rows), beside the configured;
- vLLM's `max_output_tokens_per_s` and `max_concurrent_requests` (its `bench serve`'s peaks): output
  tokens arrived in each 1 s window from the first submit, and requests active at any time of it;
- `client_limited`, with its `reason`: the schedule lag's p99 passed backend.client_lag_bound_ms, or a
  loop's process used CPU_BOUND_FRACTION of a core or more while streaming."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from llmbench.backends.loop_monitor import spread_ms
from llmbench.results.json_file import known
from llmbench.results.records import RequestRecord
from llmbench.results.summary import Client, ClientWorker, Spread

# a loop's process this busy is at its one core (the GIL): the client, not the server, sets the pace
CPU_BOUND_FRACTION = 0.9


def client_summary(
    records: Sequence[RequestRecord],
    usage: list[dict] | None,
    lag_bound_ms: float,
    max_concurrency: int | None,
) -> Client:
    """The block for the timed requests of `records`; `usage`: the backend's client_usage()."""
    timed = [r for r in records if not r.warmup]
    lags = [r.send_start_time - r.submit_time for r in timed if r.send_start_time is not None]
    schedule = msgspec.convert(spread_ms(lags), Spread | None)
    workers = msgspec.convert(usage, list[ClientWorker] | None)
    limited, reason = _verdict(schedule, workers, lag_bound_ms)
    tokens_peak, requests_peak = vllm_peaks(timed)
    return Client(
        schedule_lag_ms=schedule,
        loop_lag_ms=_worst(workers or []),
        workers=workers,
        max_in_flight=_max_in_flight(timed),
        configured_concurrency=max_concurrency,
        max_output_tokens_per_s=tokens_peak,
        max_concurrent_requests=requests_peak,
        lag_bound_ms=lag_bound_ms,
        client_limited=limited,
        reason=reason,
    )


def _verdict(
    schedule: Spread | None, workers: list[ClientWorker] | None, bound_ms: float
) -> tuple[bool, str]:
    if workers is None:
        return False, "in-process backend: the runner hands each request to the engine, no client loop"
    reasons = []
    if schedule is not None and schedule.p99 > bound_ms:
        reasons.append(
            f"schedule lag p99 {schedule.p99:.1f} ms > {bound_ms:g} ms (backend.client_lag_bound_ms)"
        )
    busy = [(i, w.cpu_fraction) for i, w in enumerate(workers) if known(w.cpu_fraction) is not None]
    reasons += [
        f"worker {i} at {cpu:.2f} of a core (CPU-bound)" for i, cpu in busy if cpu >= CPU_BOUND_FRACTION
    ]
    if reasons:
        return True, "; ".join(reasons)
    lag = f"schedule lag p99 {schedule.p99:.1f} ms" if schedule else "no schedule lag measured"
    top = max((cpu for _, cpu in busy), default=None)
    cpu = f"; busiest worker at {top:.2f} of a core" if top is not None else ""
    return False, f"{lag} within {bound_ms:g} ms{cpu}"


def _worst(workers: list[ClientWorker]) -> Spread | None:
    """The loop lag of the worker whose p99 is highest."""
    spreads = [w.loop_lag_ms for w in workers if known(w.loop_lag_ms) is not None]
    return max(spreads, key=lambda s: s.p99, default=None)


def _max_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests between their send (submit where unstamped) and their end at once."""
    events = []
    for r in records:
        if r.finish_time is not None:
            start = r.send_start_time if r.send_start_time is not None else r.submit_time
            events += [(start, 1), (r.finish_time, -1)]
    most = now = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at one time
        now += step
        most = max(most, now)
    return most


def vllm_peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """vLLM bench serve's peaks over the successful requests of each trial, the highest of the trials:
    output tokens arrived in each whole second from the trial's first submit, and requests active in
    it (from submit to the last token): (max_output_tokens_per_s, max_concurrent_requests)."""
    tokens_peak = requests_peak = 0
    for trial in sorted({r.trial for r in records}):
        done = [r for r in records if r.trial == trial and r.succeeded]
        if not done:
            continue
        start = min(r.submit_time for r in done)
        seconds = int(math.ceil(max(r.token_times[-1] for r in done) - start)) + 1
        tokens, active = [0] * seconds, [0] * seconds
        for r in done:
            for t in r.token_times:
                tokens[int(t - start)] += 1
            for second in range(int(r.submit_time - start), int(r.token_times[-1] - start) + 1):
                active[second] += 1
        tokens_peak = max(tokens_peak, max(tokens))
        requests_peak = max(requests_peak, max(active))
    return float(tokens_peak), requests_peak
