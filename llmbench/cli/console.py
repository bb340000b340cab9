"""What the user sees while and after a run: a progress bar and the headline metrics table."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from llmbench.device.clocks import describe as describe_clock
from llmbench.results.metrics import Metrics
from llmbench.results.records import RequestRecord
from llmbench.results.summary import RunSummary

console = Console(stderr=True)


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )


class RunProgress:
    """A live bar per phase: completed requests and output tokens per second so far (the Progress a run
    reports to, run/progress.py)."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8.1f} out tok/s"),
            TimeElapsedColumn(),
            console=console,
        )
        self._task = None
        self._started = 0.0
        self._output_tokens = 0

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def phase(self, label: str, total: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, visible=False)
        self._task = self._progress.add_task(label, total=total, rate=0.0)
        self._started = time.perf_counter()
        self._output_tokens = 0

    def request_done(self, record: RequestRecord) -> None:
        # as output_throughput counts: a failed request's tokens are not output delivered
        self._output_tokens += record.output_len if record.succeeded else 0
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        self._progress.update(self._task, advance=1, rate=self._output_tokens / elapsed)


# counts beside completed / failed: of the failed, past the timeout; apart, hung up on and never started
COUNT_NOTES = (("timed_out", "timed out"), ("cancelled", "cancelled"), ("not_started", "not started"))


def metrics_table(summary: RunSummary) -> Table:
    """Headline numbers of a run: throughputs, then each latency's mean, median and tail."""
    title = summary.name + ("" if summary.complete else " (incomplete)")
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = _metric_rows(summary.metrics) if summary.metrics is not None else []
    server = summary.server_metrics
    if server is not msgspec.UNSET and server.spec_drafts is not msgspec.UNSET:  # it decoded speculatively
        spec = (server.spec_acceptance_rate, server.spec_mean_accepted_length, server.spec_drafts)
        rows.append(("spec decode acceptance / mean accepted length / drafts", " / ".join(map(_fmt, spec))))
    for model, m in (summary.models or {}).items():  # a mix of served models (backend.models)
        figures = (
            f"{m.completed} done, {_fmt(m.request_throughput)} req/s, TTFT {_fmt(m.latencies.mean_ttft_ms)}"
        )
        rows.append((f"model {model}: completed, req/s, mean TTFT (ms)", figures))
    steps = summary.steps
    if steps.num_steps:
        rows.append(("engine steps", str(steps.num_steps)))
        times = (steps.mean_step_ms, steps.mean_cpu_ms_per_step, steps.mean_wait_ms)
        rows.append(("step / CPU / readback wait, mean (ms)", " / ".join(_fmt(t) for t in times)))
    if steps.value("throughput_of_bound") is not None:
        reached = f"{_fmt(steps.bound_output_throughput)} ({steps.throughput_of_bound:.1%} reached)"
        rows.append(("roofline bound output (tok/s)", reached))
        if steps.value("throughput_of_serial_bound") is not None:
            serial = steps.serial_bound_output_throughput
            rows.append(
                (
                    "serial bound output (tok/s)",
                    f"{_fmt(serial)} ({steps.throughput_of_serial_bound:.1%} reached)",
                )
            )
    kinds = [k for k in ("prefill", "decode") if steps.value(f"{k}_steps_of_bound") is not None]
    if kinds:
        parts = (
            f"{k} {steps.value(k + '_steps_of_bound'):.1%} of {_fmt(steps.value(k + '_steps_gpu_s'))} s"
            for k in kinds
        )
        rows.append(("bound / GPU time by step kind", ", ".join(parts)))
    if steps.value("gpu_clock"):
        ceiling = describe_clock(msgspec.to_builtins(steps.value("ceiling_gemm_clock")))
        clock = describe_clock(msgspec.to_builtins(steps.gpu_clock))
        clock += f" (GEMM ceiling at {ceiling})" if ceiling else ""
        rows.append(("GPU SM clock, timed trials", clock))
    for label, value in rows:
        table.add_row(label, value)
    return table


def _metric_rows(m: Metrics) -> list[tuple[str, str]]:
    counts = f"{m.completed} / {m.failed}"
    notes = [f"{m.value(key)} {words}" for key, words in COUNT_NOTES if m.value(key)]
    if notes:
        counts += f" ({', '.join(notes)})"
    rows = [
        ("completed / failed", counts),
        ("duration (s)", _fmt(m.duration_s)),
        ("request throughput (req/s)", _fmt(m.request_throughput)),
        ("output throughput (tok/s)", _fmt(m.output_throughput)),
        ("total token throughput (tok/s)", _fmt(m.total_token_throughput)),
    ]
    if m.request_goodput is not None:
        rows.append(("request goodput (req/s)", _fmt(m.request_goodput)))
    percentiles = m.latencies.percentiles
    tail = max((k for k in percentiles if k.endswith("_ttft_ms")), default=None, key=_pct)
    latencies = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
    if m.value("total_reasoning_tokens") is not None:  # a run that streamed reasoning
        latencies += (("ttfo", "TTFO"), ("reasoning_itl", "reasoning ITL"), ("answer_itl", "answer ITL"))
        split = f"{m.total_reasoning_tokens} / {m.total_answer_tokens}"
        if m.requests_without_answer:
            split += f" ({m.requests_without_answer} ended before answering)"
        rows.append(("reasoning / answer tokens", split))
    for name, label in latencies:
        values = [_fmt(m.value(f"{stat}_{name}_ms")) for stat in ("mean", "median")]
        if tail:
            values.append(_fmt(m.value(tail.replace("ttft", name))))
        suffix = f" / {tail.split('_')[0]}" if tail else ""
        rows.append((f"{label} mean / median{suffix} (ms)", " / ".join(values)))
    return rows


def _pct(key: str) -> float:
    return float(key[1:].split("_")[0])


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) else str(value)
