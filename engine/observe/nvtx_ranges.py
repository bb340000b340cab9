"""NVTX ranges in the `llmbench` domain, for Nsight Systems timelines and `nsys stats nvtx_sum`.

`nvtx_ranges()` returns None unless a profiler has attached an NVTX tool to this process, so the
hot path pays one `is not None` check per phase when nobody is listening. The `nvtx` package is
used rather than `torch.cuda.nvtx`, which raises on a CPU-only torch build."""

from __future__ import annotations

import functools
import logging
from contextlib import AbstractContextManager, nullcontext

logger = logging.getLogger(__name__)

DOMAIN = "llmbench"


class NvtxRanges:
    """Push/pop ranges in one NVTX domain. Event attributes are built once per phase name."""

    def __init__(self, domain) -> None:
        self._domain = domain
        self._attributes: dict[str, object] = {}
        # One "step" range whose payload is the step number: a new message per step would
        # register a string each time (about 14x the cost), and nvtx_sum would list every step apart.
        self._step = domain.get_event_attributes(message="step", payload=0)

    def push(self, name: str) -> None:
        attributes = self._attributes.get(name)
        if attributes is None:
            attributes = self._attributes[name] = self._domain.get_event_attributes(message=name)
        self._domain.push_range(attributes)

    def push_step(self, step: int) -> None:
        self._step.payload = step
        self._domain.push_range(self._step)

    def pop(self) -> None:
        self._domain.pop_range()


class _Range:
    __slots__ = ("_ranges", "_name")

    def __init__(self, ranges: NvtxRanges, name: str):
        self._ranges = ranges
        self._name = name

    def __enter__(self) -> None:
        self._ranges.push(self._name)

    def __exit__(self, *exc_info) -> None:
        self._ranges.pop()


def phase_range(ranges: NvtxRanges | None, name: str) -> AbstractContextManager:
    """A reusable `with` block for one named phase: an NVTX range when ranges are on, else a no-op."""
    return nullcontext() if ranges is None else _Range(ranges, name)


@functools.cache
def nvtx_ranges() -> NvtxRanges | None:
    """Ranges for the `llmbench` domain when a profiler is attached, else None (one per process)."""
    try:
        import nvtx
    except ImportError:
        return None
    domain = nvtx.get_domain(DOMAIN)
    # without an attached tool nvtx hands out a dummy domain whose calls do nothing
    if not isinstance(domain, nvtx.Domain):
        return None
    logger.info("NVTX tool attached: recording ranges in domain %r", DOMAIN)
    return NvtxRanges(domain)
