"""The machine a run happened on: software versions and hardware, plus an optional copy-bandwidth
measurement (the ceiling that MBU is judged against)."""

from __future__ import annotations

import os
import platform
import time
from importlib import metadata
from typing import Any

import torch


def collect_environment() -> dict[str, Any]:
    """Versions and hardware, as recorded in summary.json."""
    cuda = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if cuda else None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "gpu": props.name if props else None,
        "gpu_memory_gb": round(props.total_memory / 2**30, 1) if props else None,
        "cuda": torch.version.cuda if cuda else None,
    }


def measure_copy_bandwidth(size_mb: int = 256, repeats: int = 10) -> dict[str, Any]:
    """Device-to-device copy bandwidth on the GPU if there is one, else host memcpy, in GB/s.
    A copy reads and writes every byte, so 2 * size bytes move per copy."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    src = torch.empty(size_mb * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: page faults and lazy allocation stay out of the timing
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    else:
        t0 = time.perf_counter()
        for _ in range(repeats):
            dst.copy_(src)
        seconds = time.perf_counter() - t0
    return {"device": device.type, "copy_gb_per_s": 2 * src.numel() * repeats / seconds / 1e9}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
