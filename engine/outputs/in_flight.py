"""A launched step whose sampled tokens are on their way, one row per forward. Each forward's row stays
on the device, where the next step's decodes may read it (async scheduling), and is copied to pinned
host memory behind an event of its own, so reading a row waits for that forward alone, not for work
launched after it. A streamed multi-step window hands its rows over one at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from llmbench.engine.observe.timing import GpuSpan
from llmbench.engine.scheduling.scheduler import SchedulerOutput


class ForwardTokens(NamedTuple):
    """One forward's sampled tokens [n_sample]: on the device, on the host, and the event after which
    the host copy holds them (None on the CPU, where the two are one tensor; the null executor's
    simulated forward end with model.null_forward_ms)."""

    device: torch.Tensor
    host: torch.Tensor
    copied: object  # torch.cuda.Event, null_executor.SimulatedEvent or None: query() and synchronize()


class InFlightStep:
    __slots__ = ("scheduled", "span", "streamed", "num_read", "_forwards", "_rows")

    def __init__(
        self,
        scheduled: SchedulerOutput,
        forwards: Iterator[ForwardTokens],
        span: GpuSpan | None = None,
        streamed: bool = False,
    ):
        self.scheduled = scheduled
        self.span = span  # the step's GPU events, when timed on CUDA
        self.streamed = streamed  # rows handed over one by one, each as soon as it is known
        self.num_read = 0  # rows handed over so far
        self._forwards = forwards  # the executor's forwards, one ForwardTokens each
        self._rows: list[ForwardTokens] = []
        # launch: on a GPU every forward is queued at once; on the CPU a forward runs when pulled, so a
        # streamed window runs its later ones only as their turn to be handed over comes
        self._pull(1 if streamed else scheduled.batch.num_steps)

    @property
    def num_unread(self) -> int:
        return self.scheduled.batch.num_steps - self.num_read

    @property
    def tokens(self) -> torch.Tensor:
        """The last forward's tokens on the device [1, n_sample]: the feed of the next step's decodes."""
        self.launch_rest()
        return self._rows[-1].device[None]

    def launch_rest(self) -> None:
        """Every forward launched (on the CPU: run), as must be before the next step's inputs are
        prepared: a window's later forwards read the executor's input buffers."""
        self._pull(self.scheduled.batch.num_steps)

    def wait(self) -> None:
        """Until every forward's tokens are on the host."""
        self.launch_rest()
        self._synchronize(len(self._rows))

    def read(self, count: int | None = None) -> list[list[int]]:
        """The next `count` forwards' tokens (all unread ones by default), waiting for the last of them."""
        end = self.scheduled.batch.num_steps if count is None else self.num_read + count
        self._pull(end)
        self._synchronize(end)
        rows = [row.host.tolist() for row in self._rows[self.num_read : end]]
        self.num_read = end
        return rows

    def _pull(self, count: int) -> None:
        while len(self._rows) < count:
            self._rows.append(next(self._forwards))

    def _synchronize(self, count: int) -> None:
        copied = self._rows[count - 1].copied
        if copied is not None:
            copied.synchronize()
