"""The run's physical bound and how close it came, for summary.json `steps`.

Each timed step's least GPU time is max(FLOPs / peak FLOP/s, bytes / peak bandwidth), with FLOPs and
bytes from the model shape and the step's batch (metrics/step_costs.py: weights read once per forward,
the KV each sequence reads, prefill attention over its causal pairs) and the peaks the ceilings the
run measured at its start (device/ceilings.py; times tensor_parallel_size, every rank having its own).
The steps run one after another, so their sum is the least time this schedule of the workload takes.
The serial bound (serial_bound_s, throughput_of_serial_bound) also runs each step's matmuls and
attention one after the other, each at its own roofline: what a forward of dependent kernels can
reach without running attention beside the matmuls.

The window is the run's throughput's: the timed trials' steps against their output tokens and
durations, pooled over trials. bound_output_throughput = output tokens / bound_s, and
throughput_of_bound = achieved / bound = bound_s / duration_s; with one trial the achieved figure is
exactly `metrics.output_throughput`.

Where a run's time beyond its bound goes, by kind of step: the steps that ran a prompt token
(`prefill_steps_*`: chunks, with the decodes riding along) and the decode-only ones (`decode_steps_*`),
each the GPU time its steps took (their event spans) and their bound and serial bound over it. The
throughput workload spends ~1.5 s in 8 prefill steps and ~1.3 s in 16 decode windows: which of the two
holds the gap decides where work on it pays."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET

from llmbench.metrics.step_costs import StepCosts, gpu_seconds, ran_forward
from llmbench.results.metrics import Metrics
from llmbench.results.steps import GpuClock, Steps

if TYPE_CHECKING:  # device/ceilings.py measures with torch, which these sums do without
    from llmbench.device.ceilings import Ceilings

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def measured_costs(config: dict[str, Any], ceilings: Ceilings) -> StepCosts | None:
    """Step costs of the run's model at its measured ceilings, in the dtype they were measured in
    (the model's); None when the model's shape cannot be read."""
    costs = StepCosts.from_run_config(config)
    if costs is None:
        return None
    return dataclasses.replace(
        costs,
        dtype_bytes=DTYPE_BYTES.get(ceilings.dtype, costs.dtype_bytes),
        peak_bandwidth=ceilings.devices * ceilings.copy_bytes_per_s,
        peak_flops=ceilings.devices * ceilings.gemm_flops_per_s,
        peaks_source="measured",
    )


def with_bound(
    steps: Steps,
    rows: Sequence[dict[str, Any]],
    config: dict[str, Any],
    ceilings: Ceilings | str,
    trials: Sequence[Metrics],
) -> Steps:
    """`steps` with the ceilings, and with them bound_s, bound_output_throughput and
    throughput_of_bound (and their serial forms); when a figure cannot be had, `bound_unavailable`
    says why and the figures are None. `ceilings`: run_ceilings', or why the run has none."""
    steps = msgspec.structs.replace(
        steps,
        bound_s=None,
        bound_output_throughput=None,
        throughput_of_bound=None,
        serial_bound_s=None,
        serial_bound_output_throughput=None,
        throughput_of_serial_bound=None,
    )
    if isinstance(ceilings, str):
        return msgspec.structs.replace(steps, bound_unavailable=ceilings)
    steps = _with_ceilings(steps, ceilings)
    costs = measured_costs(config, ceilings)
    if costs is None:
        return msgspec.structs.replace(steps, bound_unavailable="the model's shape cannot be read")
    if not rows:
        return msgspec.structs.replace(steps, bound_unavailable="no timed engine steps")
    bounds = [costs.bounds_s(r) for r in rows]
    if None in bounds:
        why = "steps without batch context (num_context_tokens)"
        return msgspec.structs.replace(steps, bound_unavailable=why)
    bound_s, serial_s = (sum(column) for column in zip(*bounds, strict=True))
    tokens = sum(t.total_output_tokens for t in trials)
    duration = sum(t.duration_s for t in trials)
    if not (bound_s > 0 and tokens and duration > 0):
        why = "no output tokens in the timed trials"
        return msgspec.structs.replace(steps, bound_s=bound_s, bound_unavailable=why)
    return msgspec.structs.replace(
        _with_step_kinds(steps, rows, bounds),
        bound_s=bound_s,
        bound_output_throughput=tokens / bound_s,
        throughput_of_bound=bound_s / duration,
        serial_bound_s=serial_s,
        serial_bound_output_throughput=tokens / serial_s,
        throughput_of_serial_bound=serial_s / duration,
    )


def _with_ceilings(steps: Steps, ceilings: Ceilings) -> Steps:
    clock = ceilings.gemm_clock
    return msgspec.structs.replace(
        steps,
        ceiling_gemm_flops_per_s=ceilings.gemm_flops_per_s,
        ceiling_copy_bytes_per_s=ceilings.copy_bytes_per_s,
        ceilings_device=ceilings.device,
        ceilings_dtype=ceilings.dtype,
        ceilings_method=ceilings.method,
        ceilings_ms=ceilings.ms,
        ceiling_gemm_clock=UNSET if clock is None else msgspec.convert(clock, GpuClock, from_attributes=True),
        ceilings_devices=ceilings.devices,
    )


def _with_step_kinds(
    steps: Steps, rows: Sequence[dict[str, Any]], bounds: list[tuple[float, float]]
) -> Steps:
    """`steps` with <kind>_steps_gpu_s, <kind>_steps_of_bound and <kind>_steps_of_serial_bound (bound /
    GPU time) for kind prefill and decode, where the run has such steps; none of them where a step that
    ran a forward has no GPU time. A step that ran none (step_costs.ran_forward) has neither GPU time
    nor a bound, and is left out."""
    totals: dict[str, list[float]] = {}  # kind: [GPU s, bound s, serial bound s]
    for row, (bound, serial) in zip(rows, bounds, strict=True):
        if not ran_forward(row):
            continue
        gpu_s = gpu_seconds(row)
        if gpu_s is None:
            return steps
        kind = totals.setdefault("prefill" if row["num_prefill_tokens"] else "decode", [0.0, 0.0, 0.0])
        kind[0] += gpu_s
        kind[1] += bound
        kind[2] += serial
    for kind, (gpu_s, bound, serial) in totals.items():
        figures = {"gpu_s": gpu_s, "of_bound": bound / gpu_s, "of_serial_bound": serial / gpu_s}
        steps = msgspec.structs.replace(steps, **{f"{kind}_steps_{name}": v for name, v in figures.items()})
    return steps
