"""The GPU's SM clock while a kernel is timed, and what held it down, read from NVML (the driver's
management library, through nvidia-ml-py: llmbench/device/nvml.py) by a thread sampling every few
milliseconds. The same samples carry power and the energy counter, for a run's joules per token
(llmbench/device/power.py).

Why a kernel benchmark needs it: a compute-bound kernel on an H200 runs into the board's power limit.
The driver then lowers the SM clock (clock event reason "sw power cap"), and the kernel times slower by
as much. Whether the cap bites depends on what ran just before: the same attention call at B=1 new=8192
took 860 us at 1,965 MHz and 985 us at 1,785 MHz in one process (docs/measurements/h200/cudnn_context.json). A
figure is only comparable to another taken at the same clock, so `llmbench kernels` records the clock
and the limits beside each timing, and a run on the bundled engine the clock over its timed trials
(summary.json steps, beside the roofline bound, whose GEMM ceiling carries its own clock)."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from llmbench.device.nvml import GpuSample, NvmlUnavailable, open_reader

if TYPE_CHECKING:
    import torch

# NVML clock event reasons that lower the clock below what the load asks for (idle and the
# application-clock setting do not)
LIMITS = {
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x40: "sw thermal",
    0x80: "hw thermal",
    0x100: "hw power brake",
}
SAMPLE_INTERVAL_S = 0.005
# two runs whose median clocks differ by more than this have compute-bound figures that differ by it
CLOCK_MISMATCH = 0.03

Sample = GpuSample  # SM clock in MHz and clock event reasons first, as summarize() reads them


@dataclass
class ClockSummary:
    sm_clock_mhz: float  # median over the samples
    limited_fraction: float  # share of samples with any reason in LIMITS
    limits: list[str]  # the reasons seen, in LIMITS order


def summarize(samples: list[Sample]) -> ClockSummary | None:
    if not samples:
        return None
    seen = 0
    limited = 0
    for sample in samples:
        reasons = sample[1]
        seen |= reasons
        limited += any(reasons & bit for bit in LIMITS)
    names = [name for bit, name in LIMITS.items() if seen & bit]
    return ClockSummary(statistics.median(s[0] for s in samples), limited / len(samples), names)


class ClockSampler:
    """A context manager: samples `read` on a daemon thread from entry to exit, and once more at exit,
    so a span's samples cover all of it (an energy counter's increase then spans the whole trial).
    Samples accumulate over spans, each span's first index in `spans`, until take() summarizes and
    clears them."""

    def __init__(self, read: Callable[[], Sample], interval_s: float = SAMPLE_INTERVAL_S):
        self.read = read
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[Sample] = []
        self.spans: list[int] = []

    def _run(self) -> None:
        while True:
            self.samples.append(self.read())
            if self._stop.wait(self._interval_s):
                return

    def __enter__(self) -> ClockSampler:
        self._stop.clear()
        self.spans.append(len(self.samples))
        self._thread = threading.Thread(target=self._run, name="gpu-clock-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.read())

    def take(self) -> ClockSummary | None:
        """The samples since the last take(), summarized; the next span starts afresh."""
        summary = summarize(self.samples)
        self.samples, self.spans = [], []
        return summary


def nvml_reader(device: torch.device) -> Callable[[], Sample] | None:
    """A function reading the device (SM clock, clock event reasons, power, energy, memory), or None
    where NVML cannot (no nvidia-ml-py, no NVIDIA driver, a CPU run; nvml.open_reader says which)."""
    try:
        return open_reader(device)
    except NvmlUnavailable:
        return None


def device_sampler(device: torch.device, interval_s: float = SAMPLE_INTERVAL_S) -> ClockSampler | None:
    """A sampler of the device's SM clock every interval_s, or None where there is none to read (not
    an NVIDIA GPU, no NVML)."""
    read = nvml_reader(device) if device.type == "cuda" else None
    return ClockSampler(read, interval_s) if read is not None else None


def merge_readings(readings: list[dict | None]) -> dict | None:
    """Several runs' readings (an ablation variant's trials, of about equal length) as one: the median
    of their median clocks, the mean of their limited shares, every limit seen; None without any."""
    known = [r for r in readings if r]
    if not known:
        return None
    seen = {name for r in known for name in r["limits"]}
    return {
        "sm_clock_mhz": statistics.median(r["sm_clock_mhz"] for r in known),
        "limited_fraction": statistics.fmean(r["limited_fraction"] for r in known),
        "limits": [name for name in LIMITS.values() if name in seen],
    }


def clock_reading(sampler: ClockSampler | None) -> dict | None:
    """The sampler's spans since its last take(), as a result file holds them (ClockSummary's fields),
    or None."""
    summary = sampler.take() if sampler is not None else None
    return asdict(summary) if summary is not None else None


def describe(reading: dict | None) -> str:
    """A reading for tables: '1785 MHz, sw power cap 100%', '1965 MHz', or '' (none taken)."""
    if reading is None:
        return ""
    text = f"{reading['sm_clock_mhz']:.0f} MHz"
    if reading["limits"]:
        text += f", {'/'.join(reading['limits'])} {reading['limited_fraction']:.0%}"
    return text


def clock_mismatch(baseline: dict | None, current: dict | None) -> str | None:
    """Why two runs' figures may differ by their GPU clocks alone, or None: no reading on either side,
    or median clocks within CLOCK_MISMATCH of each other."""
    if not baseline or not current:
        return None
    before, after = baseline["sm_clock_mhz"], current["sm_clock_mhz"]
    if abs(after - before) <= CLOCK_MISMATCH * before:
        return None
    return (
        f"the runs ran at different SM clocks (baseline {describe(baseline)}, current {describe(current)}):"
        " compute-bound figures move with the clock as much as with the code"
    )
