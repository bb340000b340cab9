"""Ramp-up: the offered rate climbs from a start rate to the arrival's target rate over a duration,
linearly or exponentially, then stays at the target.

The ramp is applied by time rescaling: the arrival process is drawn at a constant rate r as usual, its
times t_i turned into the points u_i = r t_i of the same process at rate 1, and each u_i mapped through
the inverse of the ramp's cumulative rate L(t) = integral of rate(s) ds from 0 to t. A constant process
then submits exactly when L(t) crosses each integer, a Poisson process becomes a Poisson process of
rate rate(t), and a gamma process keeps its burstiness. The draws are the same as without the ramp, so
a ramp changes when requests come, never which requests come."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llmbench.config.schema import ArrivalConfig, RampUpConfig


def offered_rate(ramp: RampUpConfig, target: float, t: float) -> float:
    """Requests per second the ramp offers `t` seconds into the trial."""
    s, d = ramp.start_rate, ramp.duration_s
    if t >= d:
        return target
    if ramp.strategy == "linear":
        return s + (target - s) * t / d
    return s * (target / s) ** (t / d)


def cumulative(ramp: RampUpConfig, target: float, t: float) -> float:
    """L(t): how many requests the ramp has offered by time t (the integral of offered_rate)."""
    s, d = ramp.start_rate, ramp.duration_s
    before = min(t, d)
    if ramp.strategy == "linear":
        ramped = s * before + (target - s) * before**2 / (2 * d)
    else:
        k = math.log(target / s)
        ramped = s * before if k == 0 else s * d * math.expm1(k * before / d) / k
    return ramped + target * max(0.0, t - d)


def offered_rates(arrival: ArrivalConfig, times: np.ndarray) -> list[float | None]:
    """Each request's offered rate at its arrival under the arrival's ramp; None without one."""
    if not arrival.ramp_up.on:
        return [None] * len(times)
    return [offered_rate(arrival.ramp_up, arrival.rate, float(t)) for t in times]


def ramped_times(ramp: RampUpConfig, target: float, times: np.ndarray) -> np.ndarray:
    """Arrival times drawn at the constant rate `target`, moved onto the ramp."""
    return np.array([_inverse(ramp, target, target * float(t)) for t in times])


def _inverse(ramp: RampUpConfig, target: float, u: float) -> float:
    """The time t at which L(t) = u."""
    s, d = ramp.start_rate, ramp.duration_s
    total = cumulative(ramp, target, d)
    if u >= total:
        return d + (u - total) / target
    if ramp.strategy == "linear":
        # the root of s t + a t^2 = u with a = (target - s) / 2d, written without the cancellation of
        # (-s + sqrt(...)) / 2a; its square root stays real for a falling ramp too while u <= L(d)
        a = (target - s) / (2 * d)
        return 2 * u / (s + math.sqrt(s * s + 4 * a * u))
    k = math.log(target / s)
    return u / s if k == 0 else d * math.log1p(u * k / (s * d)) / k
