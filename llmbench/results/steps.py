"""summary.json's `steps`: what the step log says about where the time went (llmbench/metrics/steps.py),
the run's physical bound (metrics/roofline.py, device/ceilings.py) and the GPU's power and clock
(device/power.py, device/clocks.py). A figure a run could not have is None; a key some runs lack
entirely (CPU runs have no idle gaps, only GPU runs have ceilings) is UNSET and left out of the file.
Field order is the file's key order."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

Float = float | None


class GpuClock(msgspec.Struct):
    """The SM clock over a run (median of its samples), the share of samples the clock was held down,
    and the reasons NVML gave (device/clocks.py)."""

    sm_clock_mhz: int | float
    limited_fraction: float
    limits: list[str]


class Steps(msgspec.Struct, kw_only=True):
    num_steps: int
    num_forwards: int | UnsetType = UNSET
    mean_step_ms: Float = None
    mean_cpu_ms_per_step: Float = None
    mean_cpu_ms_per_forward: Float | UnsetType = UNSET
    mean_cpu_ms_per_seq: Float | UnsetType = UNSET
    mean_wait_ms: Float = None
    mean_schedule_ms: Float | UnsetType = UNSET
    mean_prepare_ms: Float | UnsetType = UNSET
    mean_sample_ms: Float | UnsetType = UNSET
    mean_output_ms: Float | UnsetType = UNSET
    mean_ipc_ms: Float | UnsetType = UNSET
    mean_comm_ms: Float | UnsetType = UNSET
    mean_gpu_ms: Float = None
    gpu_busy_step_spans: Float | UnsetType = UNSET
    gpu_idle_ms: Float | UnsetType = UNSET
    num_gpu_idle_gaps: int | UnsetType = UNSET
    max_gpu_idle_gap_ms: Float | UnsetType = UNSET
    # idle GPU time charged to the host phase that overlapped it
    gpu_idle_during_between_steps_ms: Float | UnsetType = UNSET
    gpu_idle_during_other_ms: Float | UnsetType = UNSET
    gpu_idle_during_output_ms: Float | UnsetType = UNSET
    gpu_idle_during_prepare_ms: Float | UnsetType = UNSET
    gpu_idle_during_sample_ms: Float | UnsetType = UNSET
    gpu_idle_during_schedule_ms: Float | UnsetType = UNSET
    mbu: Float | UnsetType = UNSET
    mfu: Float | UnsetType = UNSET
    peak_bandwidth_bytes_per_s: Float | UnsetType = UNSET
    peak_flops_per_s: Float | UnsetType = UNSET
    peaks_source: str | UnsetType = UNSET
    bound_s: Float | UnsetType = UNSET
    bound_output_throughput: Float | UnsetType = UNSET
    throughput_of_bound: Float | UnsetType = UNSET
    serial_bound_s: Float | UnsetType = UNSET
    serial_bound_output_throughput: Float | UnsetType = UNSET
    throughput_of_serial_bound: Float | UnsetType = UNSET
    ceiling_gemm_flops_per_s: Float | UnsetType = UNSET
    ceiling_copy_bytes_per_s: Float | UnsetType = UNSET
    ceilings_device: str | UnsetType = UNSET
    ceilings_dtype: str | UnsetType = UNSET
    ceilings_method: str | UnsetType = UNSET
    ceilings_ms: Float | UnsetType = UNSET
    ceiling_gemm_clock: GpuClock | UnsetType = UNSET  # the clock the GEMM ceiling ran at
    ceilings_devices: int | UnsetType = UNSET
    prefill_steps_gpu_s: Float | UnsetType = UNSET
    prefill_steps_of_bound: Float | UnsetType = UNSET
    prefill_steps_of_serial_bound: Float | UnsetType = UNSET
    decode_steps_gpu_s: Float | UnsetType = UNSET
    decode_steps_of_bound: Float | UnsetType = UNSET
    decode_steps_of_serial_bound: Float | UnsetType = UNSET
    bound_unavailable: str | UnsetType = UNSET
    energy_j: Float | UnsetType = UNSET
    joules_per_output_token: Float | UnsetType = UNSET
    joules_per_output_token_by_trial: list[Float] | None | UnsetType = UNSET
    mean_power_w: Float | UnsetType = UNSET
    max_power_w: Float | UnsetType = UNSET
    max_memory_used_gb: Float | UnsetType = UNSET
    power_unavailable: str | UnsetType = UNSET
    gpu_clock: GpuClock | None | UnsetType = UNSET

    def value(self, key: str) -> Any:
        """A figure by its key in the file (a user's `--metric steps.KEY`): None when absent."""
        value = getattr(self, key, None) if key in self.__struct_fields__ else None
        return None if value is UNSET else value


def renamed_keys(steps: dict[str, Any] | None) -> dict[str, Any] | None:
    """A `steps` object of a file written before gpu_busy_fraction was named gpu_busy_step_spans, with the
    current name, in its place."""
    if steps is None or "gpu_busy_fraction" not in steps:
        return steps
    return {("gpu_busy_step_spans" if key == "gpu_busy_fraction" else key): v for key, v in steps.items()}
