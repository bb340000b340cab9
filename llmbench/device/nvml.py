"""One reading of an NVIDIA GPU through NVML (the driver's management library, via nvidia-ml-py's
`pynvml`): SM clock, clock event reasons, power draw, the board's energy counter and memory in use.

The energy counter is the driver's own integral of power (millijoules since it loaded), so a run's
energy is the counter's increase over it, not power samples times time. GPUs older than Volta have
no counter; their readings carry power alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch


class NvmlUnavailable(Exception):
    """Why the device cannot be read (no nvidia-ml-py, no driver, a device NVML does not know)."""


class GpuSample(NamedTuple):
    sm_clock_mhz: int
    reasons: int  # NVML clock event reasons, a bitmask
    t: float = 0.0  # perf_counter when read
    power_w: float | None = None
    energy_j: float | None = None  # the energy counter; None where the GPU has none
    memory_used_bytes: int | None = None


def open_reader(device: torch.device) -> Callable[[], GpuSample]:
    """A function reading `device`; NvmlUnavailable says why there is none."""
    import torch  # here, not at the top: the CLI's tables describe readings without loading torch

    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
        # by UUID: NVML numbers every GPU of the machine, torch only those CUDA_VISIBLE_DEVICES shows
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(device).uuid}")
    except pynvml.NVMLError as e:
        raise NvmlUnavailable(f"NVML: {e}") from None
    except (AssertionError, RuntimeError) as e:  # a CPU-only torch build, no CUDA device
        raise NvmlUnavailable(f"torch sees no CUDA device {device} ({str(e)[:120]})") from None
    # the reasons call was renamed in driver 535; older drivers know only its "Throttle" name
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons = reasons or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        has_counter = True
    except pynvml.NVMLError:
        has_counter = False

    def read() -> GpuSample:
        energy_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) if has_counter else None
        return GpuSample(
            pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            reasons(handle),
            time.perf_counter(),
            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
            energy_mj / 1000 if energy_mj is not None else None,
            pynvml.nvmlDeviceGetMemoryInfo(handle).used,
        )

    return read
