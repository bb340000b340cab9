"""How busy a stream loop is: what the client's own overhead budget is made of (issue 35's item 5).

On the loop it watches, a LoopMonitor keeps
- the loop's lag: a timer is due every TICK_S, and each time it fires its lateness is kept, while a stream
  is in flight (an idle loop's punctuality says nothing about the load);
- the CPU time of the loop's process over the wall time during which a stream was in flight: near 1 core,
  the loop (and in a thread of the runner's process, everything sharing its GIL) is the bottleneck;
- the most streams it had in flight at once."""

from __future__ import annotations

import asyncio
import statistics
import time
from time import perf_counter

TICK_S = 0.005  # the lag timer's period: enough samples for a p99 in a second of load, ~0.2% of a core


class LoopMonitor:
    """Runs on the loop it watches: open() on it, started()/ended() around each stream."""

    def __init__(self):
        self.lags: list[float] = []  # seconds late, one per tick while a stream was in flight
        self.in_flight = self.max_in_flight = 0
        self._cpu_s = self._busy_s = 0.0
        self._busy_since: tuple[float, float] | None = None  # (wall, cpu) when the loop last became busy
        self._timer: asyncio.TimerHandle | None = None

    def open(self) -> None:
        self._arm(asyncio.get_running_loop())

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def started(self) -> None:
        if not self.in_flight:
            self._busy_since = (perf_counter(), time.process_time())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def ended(self) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            wall, cpu = self._busy_since
            self._busy_s += perf_counter() - wall
            self._cpu_s += time.process_time() - cpu
            self._busy_since = None

    def usage(self) -> dict:
        """The loop's figures so far (plain data: a worker process sends it to the runner)."""
        busy_s, cpu_s = self._busy_s, self._cpu_s
        if self._busy_since is not None:  # busy now: the open span counts too
            busy_s += perf_counter() - self._busy_since[0]
            cpu_s += time.process_time() - self._busy_since[1]
        return {
            "loop_lag_ms": spread_ms(self.lags),
            "cpu_s": cpu_s,
            "busy_s": busy_s,
            "cpu_fraction": cpu_s / busy_s if busy_s > 0 else None,
            "max_in_flight": self.max_in_flight,
        }

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(TICK_S, self._tick, loop, perf_counter() + TICK_S)

    def _tick(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self.in_flight:
            # uvloop's timers count whole milliseconds and may fire a little early: early is on time
            self.lags.append(max(0.0, perf_counter() - due))
        self._arm(loop)


def spread_ms(values_s: list[float]) -> dict | None:
    """p50, p99 and max of seconds, in ms (numpy's linear percentiles), or None without values."""
    if not values_s:
        return None
    ms = [v * 1000 for v in values_s]
    cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else [ms[0]] * 99
    return {"p50": cuts[49], "p99": cuts[98], "max": max(ms), "count": len(ms)}
