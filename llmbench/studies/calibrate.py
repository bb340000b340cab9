"""`llmbench calibrate`: what the benchmark client adds to what it measures, on this machine, judged by the
bundled mock server (llmbench/mock_server), which records when it actually sent every chunk.

Two parts, each an ordinary run of the config's client (backend.type openai, its backend.workers) against
a mock started in a process of its own on a free loopback port:
- fidelity: the config's workload (its concurrency or rate, its requests) against a mock of known TTFT
  and ITL; the error the client adds is its median TTFT minus the mock's (first chunk sent minus request
  read) and its mean ITL minus the mock's (per token, first to last);
- capacity: streams doubled from 1 to max_streams against a mock that sends a chunk every millisecond
  from the start (TTFT 0), 2 requests a stream, until a run is client-limited (summary.json's client
  block: schedule lag p99 past backend.client_lag_bound_ms, or a CPU-bound worker); the highest load
  that was not is what the client sustains within that bound, in streams and chunks per second. With
  backend.workers auto (or 1) the ladder runs one worker, and its figure is kept for this host and
  version (host_capacity): what `auto` sizes later runs' workers by (backends/client_capacity.py).

calibrate.json holds both; each run's directory sits beside it."""

from __future__ import annotations

import datetime
import json
import os
import shlex
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from llmbench.backends.client_capacity import (
    DEFAULT_CHUNKS_PER_S,
    STREAM_CHUNKS_PER_S,
    HostCapacity,
    save_capacity,
)
from llmbench.config.load import config_label, load_config
from llmbench.engine.config import ConfigError
from llmbench.mock_server import MockServer, MockSettings, StreamRecord
from llmbench.results.calibrate import Calibrate, CalibrateOptions, Fidelity, Level
from llmbench.results.json_file import known
from llmbench.results.records import RequestRecord, load_requests
from llmbench.results.summary import Client, RunSummary
from llmbench.run.result_files import default_run_dir
from llmbench.run.workload import WorkloadError
from llmbench.studies.study import StudyResult

if TYPE_CHECKING:
    from llmbench.run.progress import Progress

CAPACITY_TOKENS = 128  # per request of the capacity runs: a stream lasts ~128 ms at a chunk a millisecond
MOCK_MAX_TOKENS = 1 << 20  # the fidelity mock streams what each request asks for
# the config is checked as the HTTP client it runs as, whatever backend it names (its workers are the
# point); each run then gives the URL of its own mock
AS_CLIENT = ("backend.type=openai", "backend.url=http://127.0.0.1")


class CalibrateError(ValueError):
    """Model or backend settings the calibration's runs cannot use (exit code 2)."""


class _Interrupted(Exception):
    """A run was cut short by Ctrl-C or SIGTERM: the calibration stops, keeping what it measured."""


def run_calibrate(
    config_path: Path,
    overrides: list[str],
    options: CalibrateOptions,
    out_dir: Path | None,
    progress: Progress | None = None,
) -> StudyResult:
    base = load_config(config_path, [*overrides, *AS_CLIENT])
    out_dir = Path(out_dir or default_run_dir(f"{base.name}-calibrate"))
    command = ["llmbench", "calibrate", str(config_path), *[a for o in overrides for a in ("--set", o)]]
    data = Calibrate(
        command=shlex.join(command),
        options=options,
        workers=base.backend.workers,
        lag_bound_ms=base.backend.client_lag_bound_ms,
        complete=False,
    )
    result = StudyResult(out_dir, data)
    # auto sizes by one worker's figure, which the ladder measures; the config's own number it keeps
    ladder_workers = 1 if base.backend.workers == "auto" else base.backend.workers

    def run(
        settings: MockSettings, name: str, load: list[str]
    ) -> tuple[RunSummary, list[RequestRecord], list]:
        with MockServer(settings) as mock:
            mock_sets = ["backend.type=openai", f"backend.url={mock.url}", "backend.model=mock"]
            # the mock has no /metrics; output.dir is the run's own directory here
            config = load_config(
                config_path, [*overrides, *mock_sets, "telemetry.server_metrics=false", *load]
            )
            summary, rows, sent, interrupted = _judged_run(
                config, config_label(config_path), out_dir / name, mock, progress
            )
        data.runs = [*(known(data.runs) or []), name]
        if interrupted:
            data.stop_reason = f"interrupted during {name}"
            data.save(out_dir / "calibrate.json")
            raise _Interrupted
        return summary, rows, sent

    try:
        _calibrate(options, data, out_dir, run, ladder_workers)
    except _Interrupted:
        result.interrupted = True
        return result
    capacity = host_capacity(data.capacity, base.backend.client_lag_bound_ms) if ladder_workers == 1 else None
    if capacity is not None:
        data.host_capacity_file = str(save_capacity(capacity))
        data.save(out_dir / "calibrate.json")
    return result


def host_capacity(levels: list[Level], lag_bound_ms: float) -> HostCapacity | None:
    """One worker's figure from its ladder: the highest rung within the bound, where a rung above it was
    not (the host's limit), or where it passes the estimate auto takes without one (a ladder that never
    reached the limit gives a lower bound, which must not make auto add workers)."""
    sustained = [level for level in levels if not level.client_limited and level.chunks_per_s]
    if not sustained:
        return None
    top = sustained[-1]
    if not levels[-1].client_limited and top.chunks_per_s <= DEFAULT_CHUNKS_PER_S:
        return None
    return HostCapacity(top.chunks_per_s, top.streams, lag_bound_ms, datetime.date.today().isoformat())


def _calibrate(
    options: CalibrateOptions, data: Calibrate, out_dir: Path, run: Callable, ladder_workers: int
) -> None:
    """The error at the config's load, then the ladder of streams until a run is client-limited."""
    fidelity = MockSettings(ttft_ms=options.ttft_ms, itl_ms=options.itl_ms, output_tokens=MOCK_MAX_TOKENS)
    summary, rows, sent = run(fidelity, "fidelity", [])
    data.fidelity = fidelity_error(rows, sent, known(summary.client))
    data.save(out_dir / "calibrate.json")

    # the load backend.workers auto sizes for, so that the figure kept divides it
    capacity = MockSettings(ttft_ms=0, itl_ms=1000 / STREAM_CHUNKS_PER_S, output_tokens=CAPACITY_TOKENS)
    data.capacity = []
    streams = 1
    while streams <= options.max_streams:
        load = [*_ladder_load(streams), f"backend.workers={ladder_workers}"]
        summary, rows, sent = run(capacity, f"streams-{streams}", load)
        client = summary.client
        data.capacity.append(
            Level(
                streams=streams,
                workers=ladder_workers,
                chunks_per_s=_chunks_per_s(rows),
                mock_chunks_per_s=_mock_chunks_per_s(sent),
                schedule_lag_ms=client.schedule_lag_ms,
                client_limited=client.client_limited,
                reason=client.reason,
            )
        )
        data.save(out_dir / "calibrate.json")
        if client.client_limited:
            break
        streams *= 2
    sustained = [level for level in data.capacity if not level.client_limited]
    data.sustained = sustained[-1] if sustained else None
    data.load_average_1m = os.getloadavg()[0]
    data.complete = True
    data.save(out_dir / "calibrate.json")


def _ladder_load(streams: int) -> list[str]:
    """The rung's workload, replacing the config's whole: set key by key, the config's own length
    bounds, prefix groups, dataset or sessions would reshape it or refuse it (a fixed 16-token prompt
    is outside the quickstart's input range [32, 256])."""
    workload = {
        "num_requests": 2 * streams,
        "max_concurrency": streams,
        "input": {"dist": "fixed", "mean": 16},
        "output": {"dist": "fixed", "mean": CAPACITY_TOKENS},
        "arrival": {"process": "inf"},
    }
    return [f"workload={json.dumps(workload)}"]


def _judged_run(
    config, label: str, run_dir: Path, mock: MockServer, progress
) -> tuple[RunSummary, list[RequestRecord], list[StreamRecord], bool]:
    """The run's summary and rows, what the mock sent for its timed requests (not the preflight's
    request or the warm-up's, which come first: as many as the warm-up rows, a session's turns each),
    and whether the run was interrupted. What the config's settings cannot do begins with `label`."""
    from llmbench.backends.factory import make_backend
    from llmbench.run.runner import run_benchmark

    try:
        backend = make_backend(config)
    except ValueError as e:  # the model settings name something unusable, or the preflight refused
        raise CalibrateError(f"{label}: {e}") from None
    mock.records(reset=True)  # the preflight's request
    try:
        run = run_benchmark(config, run_dir, backend=backend, progress=progress, replace=True)
    except (ConfigError, WorkloadError) as e:
        raise CalibrateError(f"{label}: {e}") from None
    rows = load_requests(run_dir)
    warmup = sum(row.warmup for row in rows)
    sent = sorted(mock.records(), key=lambda r: r.received)[warmup:]
    return run.summary, rows, sent, run.interrupted


def fidelity_error(rows: list[RequestRecord], sent: list[StreamRecord], client: Client | None) -> Fidelity:
    """The client's median TTFT and mean ITL (per token) against the mock's, in ms, over the timed
    requests that completed; `client` is the run's own account of its overhead."""
    done = [r for r in rows if not r.warmup and r.succeeded]
    served = [s for s in sent if s.status == 200 and s.sends]
    client_ttft = _median([r.first_token_time - r.submit_time for r in done])
    mock_ttft = _median([s.sends[0] - s.received for s in served])
    client_itl = _per_token([(r.token_times[-1] - r.token_times[0], r.output_len) for r in done])
    mock_itl = _per_token([(s.sends[-1] - s.sends[0], s.tokens) for s in served])
    return Fidelity(
        requests=len(done),
        median_ttft_error_ms=_difference_ms(client_ttft, mock_ttft),
        mean_itl_error_ms=_difference_ms(client_itl, mock_itl),
        client_median_ttft_ms=_ms(client_ttft),
        mock_median_ttft_ms=_ms(mock_ttft),
        client_mean_itl_ms=_ms(client_itl),
        mock_mean_itl_ms=_ms(mock_itl),
        client=client,
    )


def _chunks_per_s(rows: list[RequestRecord]) -> float | None:
    """Tokens (a chunk each from the capacity mock) the client took in over its span, first submit to
    last token."""
    done = [r for r in rows if r.token_times]
    if not done:
        return None
    span = max(r.token_times[-1] for r in done) - min(r.submit_time for r in done)
    return sum(len(r.token_times) for r in done) / span if span > 0 else None


def _mock_chunks_per_s(sent: list[StreamRecord]) -> float | None:
    served = [s for s in sent if s.status == 200 and s.sends]
    if not served:
        return None
    span = max(s.sends[-1] for s in served) - min(s.received for s in served)
    return sum(sum(s.events) for s in served) / span if span > 0 else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _per_token(spans: list[tuple[float, int]]) -> float | None:
    gaps = sum(n - 1 for _, n in spans)
    return sum(span for span, _ in spans) / gaps if gaps else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _difference_ms(client: float | None, mock: float | None) -> float | None:
    return None if client is None or mock is None else (client - mock) * 1000


def calibrate_table(data: Calibrate):
    """The client's error at the config's load, then each rung of the capacity ladder."""
    from rich.table import Table

    fidelity = data.fidelity
    lag = fidelity.client.schedule_lag_ms if fidelity.client else None
    table = Table(
        title=f"client error at the config's load: TTFT {_text(fidelity.median_ttft_error_ms)} ms "
        f"(median), ITL {_text(fidelity.mean_itl_error_ms)} ms (mean), "
        f"schedule lag p99 {_text(lag.p99 if lag else None)} ms",
        caption=_sustained_text(data),
    )
    for header in ("streams", "chunks/s taken in", "chunks/s sent", "schedule lag p99 ms", "client-limited"):
        table.add_column(header, justify="right")
    for level in known(data.capacity) or []:
        table.add_row(
            str(level.streams),
            _text(level.chunks_per_s, "{:,.0f}"),
            _text(level.mock_chunks_per_s, "{:,.0f}"),
            _text(level.schedule_lag_ms.p99 if level.schedule_lag_ms else None),
            level.reason if level.client_limited else "no",
        )
    return table


def _sustained_text(data: Calibrate) -> str:
    top = known(data.sustained)
    bound = f"schedule lag p99 within {data.lag_bound_ms:g} ms, no CPU-bound worker"
    if top is None:
        return f"sustained: not even 1 stream with {bound}"
    text = f"sustained: {top.streams} streams, {_text(top.chunks_per_s, '{:,.0f}')} chunks/s with {bound}"
    if known(data.host_capacity_file):
        text += f"; backend.workers auto sizes by it (kept in {data.host_capacity_file})"
    return text


def _text(value: float | None, form: str = "{:.2f}") -> str:
    return "n/a" if value is None else form.format(value)
