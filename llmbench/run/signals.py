"""SIGTERM handled as Ctrl-C. A CI runner or a batch scheduler stops a job with SIGTERM; by default Python
dies at once and a run leaves no summary.json. Raised as a KeyboardInterrupt instead, it takes every path
Ctrl-C takes: the rows so far stay on disk, summary.json is written with `complete: false`, and its
stop_reason names the signal."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised in the main thread where Ctrl-C's KeyboardInterrupt would be."""


def interrupt_name(error: KeyboardInterrupt) -> str:
    """What stopped the run, as stop_reason says it."""
    return "SIGTERM" if isinstance(error, Terminated) else "Ctrl-C"


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, the first SIGTERM raises Terminated; later ones are ignored while the partial
    results are written (a scheduler's SIGKILL still ends the process). The old handler comes back after."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
