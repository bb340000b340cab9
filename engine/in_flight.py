"""A launched step whose sampled tokens are on their way. They stay on the device, where the next
step's decodes may read them (async output), and are copied to the host without blocking; reading
them waits for that copy alone, not for work launched after it."""

from __future__ import annotations

import torch

from engine.scheduler import SchedulerOutput
from engine.timing import GpuSpan


class InFlightStep:
    __slots__ = ("scheduled", "tokens", "span", "_host", "_copied")

    def __init__(self, scheduled: SchedulerOutput, tokens: torch.Tensor, span: GpuSpan | None = None):
        self.scheduled = scheduled
        self.tokens = tokens  # [num_steps, n_sample] on the executor's device
        self.span = span  # the step's GPU events, when timed on CUDA
        if tokens.is_cuda:
            self._host = tokens.to("cpu", non_blocking=True)  # lands in pinned memory
            self._copied = torch.cuda.Event()
            self._copied.record()
        else:
            self._host, self._copied = tokens, None

    def read(self) -> list[list[int]]:
        """The sampled tokens, one row per forward: the step's one wait on the device."""
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.tolist()
