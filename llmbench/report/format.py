"""Friendly labels, units, one-line definitions and one number format for every figure the report shows,
so a key name never reaches the page and 2,979.7 never sits next to 2143.4 or 0.007121."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any

from llmbench.device.clocks import describe as describe_clock


@dataclass(frozen=True)
class Metric:
    label: str
    unit: str  # "ms", "tok/s", "%" (a fraction shown as a percentage), "" for counts
    definition: str


LATENCY = {
    "ttft": ("TTFT", "time to first token: first output token arrival − submit"),
    "tpot": ("TPOT", "time per output token: (E2EL − TTFT) / (output tokens − 1), per request"),
    "itl": ("ITL", "inter-token latency: every gap between token arrivals, pooled over requests"),
    "e2el": ("E2EL", "end-to-end latency: last output token arrival − submit"),
    # a reasoning model's run only
    "ttfo": (
        "TTFO",
        "time to first output token: the answer's first token arrival − submit, reasoning left out",
    ),
    "reasoning_itl": ("Reasoning ITL", "inter-token latency between the reasoning's token arrivals"),
    "answer_itl": ("Answer ITL", "inter-token latency between the answer's token arrivals"),
}
STATS = {"mean": "mean", "median": "p50", "std": "std dev", "min": "min", "max": "max"}

METRICS = {
    "output_throughput": Metric(
        "Output throughput", "tok/s", "output tokens of the timed requests / duration"
    ),
    "request_throughput": Metric("Request throughput", "req/s", "completed requests / duration"),
    "total_token_throughput": Metric("Total token throughput", "tok/s", "input + output tokens / duration"),
    "request_goodput": Metric("Goodput", "req/s", "completed requests meeting every SLO / duration"),
    "completed": Metric("Completed requests", "", "requests that finished normally (warm-up excluded)"),
    "failed": Metric("Failed requests", "", "errors, rejections and aborts"),
    "duration_s": Metric("Duration", "s", "first submit to last completion of the timed requests"),
    "total_input_tokens": Metric("Input tokens", "", "prompt tokens of the timed requests"),
    "total_output_tokens": Metric("Output tokens", "", "output tokens of the timed requests"),
    "total_reasoning_tokens": Metric("Reasoning tokens", "", "output tokens that streamed as reasoning"),
    "total_answer_tokens": Metric("Answer tokens", "", "output tokens that were the answer"),
    "requests_without_answer": Metric(
        "Requests without answer", "", "completed requests that ended while still reasoning (no TTFO)"
    ),
    # the step log (summary.json "steps")
    "num_steps": Metric("Engine steps", "", "scheduler steps in the step log"),
    "num_forwards": Metric("Forward passes", "", "model forwards (a multi-step step runs several)"),
    "mean_step_ms": Metric("Step time", "ms", "mean wall time of an engine step (t_end − t_start)"),
    "mean_cpu_ms_per_step": Metric(
        "CPU per step", "ms", "host work per step: every phase but the readback wait"
    ),
    "mean_cpu_ms_per_forward": Metric("CPU per forward", "ms", "host work per model forward"),
    "mean_cpu_ms_per_seq": Metric("CPU per sequence", "ms", "host work per step per running sequence"),
    "mean_wait_ms": Metric("Readback wait", "ms", "per step: the host blocked reading back sampled tokens"),
    "mean_schedule_ms": Metric("Schedule", "ms", "per step: picking the batch and allocating KV blocks"),
    "mean_prepare_ms": Metric(
        "Prepare",
        "ms",
        "per step: building the inputs and launching the forward (on the CPU, running it: a CPU forward "
        "is synchronous)",
    ),
    "mean_sample_ms": Metric("Readback wait", "ms", "per step: the host blocked reading back sampled tokens"),
    "mean_output_ms": Metric("Output", "ms", "per step: appending tokens, finishing requests, streaming"),
    "mean_ipc_ms": Metric("IPC", "ms", "per step: messages between the engine core and the frontend"),
    "mean_comm_ms": Metric(
        "Communication",
        "ms",
        "per step: tensor-parallel broadcasts, all-reduces and gathers (inside prepare/wait)",
    ),
    "mean_gpu_ms": Metric("GPU per step", "ms", "mean GPU span of a step: first event to last kernel"),
    "gpu_busy_step_spans": Metric(
        "GPU busy (step spans)",
        "%",
        "union of the steps' GPU spans / wall time (kernel busy is in a profile)",
    ),
    "gpu_idle_ms": Metric("GPU idle", "ms", "total wall time with no step on the GPU"),
    "num_gpu_idle_gaps": Metric("GPU idle gaps", "", "stretches with no step on the GPU"),
    "max_gpu_idle_gap_ms": Metric(
        "Longest GPU idle gap", "ms", "the longest stretch with no step on the GPU"
    ),
    "mbu": Metric(
        "MBU", "%", "model bandwidth utilization: bytes a step must read / GPU time / peak bandwidth"
    ),
    "mfu": Metric("MFU", "%", "model FLOPs utilization: FLOPs of a step / GPU time / peak FLOP/s"),
    "peak_bandwidth_bytes_per_s": Metric("Peak bandwidth", "B/s", "the bandwidth MBU is measured against"),
    "peak_flops_per_s": Metric("Peak FLOP/s", "FLOP/s", "the FLOP rate MFU is measured against"),
    "peaks_source": Metric("Peaks from", "", "the run config's hardware section, or H200 defaults"),
    "bound_s": Metric(
        "Bound time", "s", "sum over the timed steps of max(FLOPs / GEMM ceiling, bytes / copy ceiling)"
    ),
    "bound_output_throughput": Metric(
        "Bound output throughput", "tok/s", "output tokens of the timed requests / bound time"
    ),
    "throughput_of_bound": Metric(
        "Fraction of bound", "%", "output throughput / bound output throughput (= bound time / duration)"
    ),
    "serial_bound_output_throughput": Metric(
        "Serial bound output throughput",
        "tok/s",
        "output tokens / the sum over steps of matmuls' and attention's own roofline times",
    ),
    "throughput_of_serial_bound": Metric(
        "Fraction of serial bound", "%", "output throughput / serial bound output throughput"
    ),
    "ceiling_gemm_flops_per_s": Metric(
        "GEMM ceiling", "FLOP/s", "measured at run start: a large dense matmul in the model's dtype"
    ),
    "ceiling_copy_bytes_per_s": Metric(
        "Copy ceiling", "B/s", "measured at run start: a device-to-device copy, bytes read + written"
    ),
    "gpu_clock": Metric(
        "GPU SM clock",
        "clock",
        "median SM clock over the timed trials, and what held it down (share of 20 ms samples)",
    ),
    "ceiling_gemm_clock": Metric("GEMM ceiling's SM clock", "clock", "the same over the ceiling's matmul"),
    "kernel_busy_fraction": Metric(
        "kernel busy (nsys)", "%", "union of kernel intervals on the nsys timeline / its length"
    ),
}
# figures only a run with GPU timing (CUDA) has: left out of CPU runs' tables instead of shown as dashes
GPU_ONLY = re.compile(r"^(mean_gpu_ms|gpu_.*|num_gpu_.*|max_gpu_.*|mbu|mfu|peak.*)$")
# a rate in the largest prefix that keeps it at 1 or more: a CPU's GEMM ceiling reads 20.3 GFLOP/s, not 0.0
# TFLOP/s; bandwidth stops at GB/s, as device sheets quote it (4,800 GB/s)
RATE_PREFIXES = {"FLOP/s": ("T", "G", "M", "k"), "B/s": ("G", "M", "k")}
SCALE = {"T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0}
_LATENCY_KEY = re.compile(rf"^(mean|median|std|min|max|p[0-9.]+)_({'|'.join(LATENCY)})_ms$")
_IDLE_KEY = re.compile(r"^gpu_idle_during_(\w+)_ms$")
_STEP_KIND_KEY = re.compile(r"^(prefill|decode)_steps_(gpu_s|of_bound|of_serial_bound)$")
_STEP_KIND_FIGURE = {
    "gpu_s": ("GPU time", "s", "the GPU time of the run's {kind} steps (their event spans)"),
    "of_bound": ("fraction of bound", "%", "the {kind} steps' bound / their GPU time"),
    "of_serial_bound": ("fraction of serial bound", "%", "the {kind} steps' serial bound / their GPU time"),
}
_STEP_KINDS = {"prefill": "prefill (any prompt token)", "decode": "decode-only"}


def describe(key: str) -> Metric:
    """Label, unit and definition of a summary.json key; an unknown key keeps its name as label."""
    if key in METRICS:
        return METRICS[key]
    if key == "gpu_busy_fraction":
        return METRICS["gpu_busy_step_spans"]
    match = _LATENCY_KEY.match(key)
    if match:
        stat, name = match.groups()
        label, definition = LATENCY[name]
        return Metric(f"{label} {STATS.get(stat, stat)}", "ms", definition)
    match = _STEP_KIND_KEY.match(key)
    if match:
        kind, figure = match.groups()
        label, unit, definition = _STEP_KIND_FIGURE[figure]
        return Metric(f"{kind.capitalize()} steps: {label}", unit, definition.format(kind=_STEP_KINDS[kind]))
    match = _IDLE_KEY.match(key)
    if match:
        phase = match.group(1).replace("_", " ")
        return Metric(f"GPU idle during {phase}", "ms", f"GPU idle time that overlapped the host's {phase}")
    return Metric(key.replace("_", " "), "", "")


def number(value: Any, unit: str = "") -> str:
    """One format everywhere: three significant figures, thousands separators, no exponent; a
    fraction with unit % as a percentage. Escaped, ready for HTML."""
    if unit == "clock" and isinstance(value, dict):
        return html.escape(describe_clock(value))
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a" if value is None else html.escape(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a" if math.isnan(value) else ("∞" if value > 0 else "−∞")
    if unit == "%":
        return f"{100 * value:.1f}%"
    if unit in RATE_PREFIXES:
        prefix = next((p for p in RATE_PREFIXES[unit] if abs(value) >= SCALE[p]), "")
        return f"{number(value / SCALE[prefix])} {prefix}{unit}"
    if isinstance(value, int):
        return f"{value:,}"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size == 0:
        return "0"
    if size < 1e-4:
        return "<0.0001" if value > 0 else "−<0.0001"
    decimals = min(6, max(1, 2 - math.floor(math.log10(size))))
    return f"{value:.{decimals}f}"


def with_unit(value: Any, unit: str) -> str:
    """The number and its unit, e.g. `2,980 tok/s`, `12.3 ms`, `99.6%`."""
    text = number(value, unit)
    # a rate (RATE_PREFIXES) has its prefixed unit from number() already
    if value is None or unit in ("", "%", *RATE_PREFIXES) or not isinstance(value, int | float):
        return text
    return f"{text} {unit}"


def plural(count: Any, noun: str, nouns: str | None = None) -> str:
    """`1 request`, `3 requests`; a count the summary lacks (`?`) takes the plural."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def header_cell(key: str) -> str:
    """A table heading with its unit and the definition on hover."""
    metric = describe(key)
    unit = f" ({metric.unit})" if metric.unit and metric.unit not in ("%", "B/s", "FLOP/s") else ""
    return f'<span title="{html.escape(metric.definition)}">{html.escape(metric.label)}{unit}</span>'
