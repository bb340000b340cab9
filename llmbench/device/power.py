"""Power and energy over a run's timed trials, from the GPU samples its clock sampler took
(llmbench/device/clocks.py, llmbench/device/nvml.py): joules per output token, mean and peak power,
memory in use, and the series a report plots.

Energy is the energy counter's increase over each trial, summed; mean power is that energy over the
trials' sampled time. Each trial's own joules per output token are kept too, so repeated trials show
their spread. Without a counter, power alone is known: energy and joules per token stay None, as
every figure does, with the reason, when no GPU could be read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmbench.device.nvml import GpuSample

MAX_SERIES_POINTS = 2000  # longer runs are thinned to this many samples for the plot


@dataclass(frozen=True)
class Power:
    """A run's power figures, as summary.json's steps hold them (`unavailable` as power_unavailable)."""

    energy_j: float | None = None
    joules_per_output_token: float | None = None
    joules_per_output_token_by_trial: list[float | None] | None = None
    mean_power_w: float | None = None
    max_power_w: float | None = None
    max_memory_used_gb: float | None = None
    unavailable: str | None = None  # why some figure is None; None when every one is known


def power_summary(
    samples: Sequence[GpuSample], spans: Sequence[int], trial_output_tokens: Sequence[int]
) -> Power:
    """`spans`: the index in `samples` where each trial's sampling began; `trial_output_tokens`: each
    trial's output tokens, in the same order."""
    if not samples:
        return no_power("no GPU sample was taken")
    bounds = [*spans, len(samples)]
    by_trial = [samples[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    trials = [trial for trial in by_trial if trial]  # one shorter than a sampling interval has none
    energies = [_energy(trial) if trial else None for trial in by_trial]
    sampled = [e for e, trial in zip(energies, by_trial, strict=True) if trial]
    energy = sum(sampled) if None not in sampled else None
    output_tokens = sum(trial_output_tokens)
    per_token = None
    if energy is not None and len(by_trial) == len(trial_output_tokens):
        per_token = [
            e / n if e is not None and n else None for e, n in zip(energies, trial_output_tokens, strict=True)
        ]
    seconds = sum(trial[-1].t - trial[0].t for trial in trials)
    powers = [s.power_w for s in samples if s.power_w is not None]
    memory = [s.memory_used_bytes for s in samples if s.memory_used_bytes is not None]
    if energy is not None and seconds > 0:
        mean_power = energy / seconds
    else:
        mean_power = sum(powers) / len(powers) if powers else None
    no_counter = "the GPU has no energy counter: energy and joules per token are unknown"
    return Power(
        energy_j=energy,
        joules_per_output_token=energy / output_tokens if energy is not None and output_tokens else None,
        joules_per_output_token_by_trial=per_token,
        mean_power_w=mean_power,
        max_power_w=max(powers) if powers else None,
        max_memory_used_gb=max(memory) / 1e9 if memory else None,
        unavailable=no_counter if energy is None else None,
    )


def _energy(trial: Sequence[GpuSample]) -> float | None:
    """The counter's increase over a trial's samples; None without a counter."""
    if trial[0].energy_j is None or trial[-1].energy_j is None:
        return None
    return trial[-1].energy_j - trial[0].energy_j


def no_power(reason: str) -> Power:
    return Power(unavailable=reason)


def power_series(samples: Sequence[GpuSample], start: float) -> list[dict[str, float | None]]:
    """Samples for a power and clock plot, `start` (perf_counter) as 0, thinned evenly."""
    step = max(1, -(-len(samples) // MAX_SERIES_POINTS))
    return [
        {
            "time_s": s.t - start,
            "power_w": s.power_w,
            "sm_clock_mhz": s.sm_clock_mhz,
            "memory_used_gb": s.memory_used_bytes / 1e9 if s.memory_used_bytes is not None else None,
        }
        for s in samples[::step]
    ]
