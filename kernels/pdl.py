"""Programmatic dependent launch (Hopper and later): a kernel launched with it may be scheduled while the
kernel before it in the stream is still finishing. Each such kernel waits (`wait_for_previous_kernel`)
before it reads anything the previous kernel wrote, and may do independent work, like streaming its
weights, before that. At batch 1 a decode step is ~290 short kernels, and the gap between two of them
(the tail of one, the launch and first loads of the next) is a visible share of the step.

EngineConfig.dependent_launch switches it off (the model runner applies it here, for the process)."""

from __future__ import annotations

import functools
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton wheel for this platform: the torch backend runs, the kernels cannot
    triton = None

_enabled = True


def set_enabled(enabled: bool) -> None:
    """Use dependent launch where the device supports it (True) or never (False), process-wide: kernel
    launches and CUDA-graph captures after this call follow it."""
    global _enabled
    _enabled = enabled


@functools.lru_cache
def device_supports(device: torch.device) -> bool:
    """True on an NVIDIA device of compute capability 9.0 or later, compiled (the interpreter has no grid
    dependency control, and ROCm, which also reports its GPUs as "cuda", has none either)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1" or torch.version.hip:
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


if triton is not None:

    @triton.jit
    def wait_for_previous_kernel(PDL: tl.constexpr):
        """Block until the previous kernel has finished and its writes are visible, then let the next
        kernel be scheduled. The next one is released only once every program of this one has started,
        so its waiting programs never take a slot this kernel needs, and only one kernel at a time waits
        ahead. Call it before any early return: a program that skips it lets its kernel finish before
        the one it depends on."""
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()


def launch_args(device: torch.device) -> dict:
    """Keyword arguments for a kernel launch: the kernel's PDL flag and Triton's launch option, always
    together (a kernel launched early that does not wait would race the previous one)."""
    use = _enabled and device_supports(device)
    return {"PDL": use, "launch_pdl": use}
