"""Each forward's sampled tokens on their way to the host: a copy into pinned memory behind an event of
its own, recorded right after the forward's launch so that the event fires when that forward is done,
not when the window is. On CUDA the pinned rows and the events are a ring made once, so a forward
allocates no pinned memory and creates no event (each would be a few CUDA calls of host time)."""

from __future__ import annotations

import torch
from llmbench.engine.outputs.in_flight import ForwardTokens


class TokenReadback:
    """A ring of `size` pinned rows of max_rows token ids, each with its event. A row is read before the
    ring comes back to it as long as size covers the forwards launched and not yet read: the engine
    holds at most two launched steps (the one in flight and the next), of num_scheduler_steps forwards
    each."""

    def __init__(self, device: torch.device, max_rows: int, size: int):
        self._on_cuda = device.type == "cuda"
        if not self._on_cuda:
            return
        self._rows = [torch.empty(max_rows, dtype=torch.int64, pin_memory=True) for _ in range(size)]
        self._events = [torch.cuda.Event() for _ in range(size)]
        # recorded on a stream held, not looked up: torch.cuda.current_stream() is a Python call of
        # 4-15 us on a GPU host, several times a step
        self._stream = torch.cuda.current_stream(device)
        self._views: list[torch.Tensor | None] = [None] * size  # each row's last view: a steady batch's
        self._next = 0

    def __call__(self, tokens: torch.Tensor) -> ForwardTokens:
        """Start the host copy of tokens [n] (int64), just sampled."""
        if not self._on_cuda:
            return ForwardTokens(tokens, tokens, None)  # the host tensor already
        i = self._next
        self._next = (i + 1) % len(self._rows)
        host = self._views[i]
        if host is None or host.shape[0] != tokens.shape[0]:
            host = self._views[i] = self._rows[i][: tokens.shape[0]]
        host.copy_(tokens, non_blocking=True)
        self._events[i].record(self._stream)
        return ForwardTokens(tokens, host, self._events[i])
