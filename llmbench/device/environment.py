"""The machine a run happened on: software versions (llmbench's own and its git commit included),
hardware and the CPU threads torch uses, plus an optional copy-bandwidth measurement (the ceiling that
MBU is judged against). Also where the thread count is set."""

from __future__ import annotations

import functools
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import llmbench
from llmbench.device.ceilings import copy_seconds
from llmbench.device.machine import Environment


def collect_environment() -> Environment:
    """Versions and hardware, as recorded in summary.json."""
    cuda = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if cuda else None
    return Environment(
        llmbench=llmbench.__version__,
        git_commit=_git_commit(),
        python=platform.python_version(),
        platform=platform.platform(),
        cpu=_cpu_model(),
        cpu_cores=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        torch=str(torch.__version__),  # a TorchVersion, which no JSON encoder but json.dumps takes
        triton=_version("triton"),
        transformers=_version("transformers"),
        flash_attn_4=_version("flash-attn-4"),  # prefill_attention: flash's kernels, when installed
        gpu=props.name if props else None,
        gpu_memory_gb=round(props.total_memory / 2**30, 1) if props else None,
        cuda=torch.version.cuda if cuda else None,
        command=command_line(),
    )


def command_line() -> str:
    """This process's command line, so that a result file names what made it (`python -m llmbench` as
    typed rather than the path of its __main__.py)."""
    program = Path(sys.argv[0]).name
    if program == "__main__.py":
        program = "python -m llmbench"
    return " ".join([program, shlex.join(sys.argv[1:])]).strip()


def apply_cpu_threads(threads: int | None) -> None:
    """Give torch `threads` CPU threads in this process and in the engine processes it starts (a
    process-split core is a fresh interpreter: it reads OMP_NUM_THREADS); None leaves torch's default."""
    if threads is None:
        return
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


@functools.lru_cache(maxsize=1)
def _git_commit() -> str | None:
    """The commit of the checkout llmbench runs from, "+dirty" when tracked files changed; None when
    it is not a git checkout (a pip install) or git is missing."""
    root = Path(llmbench.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if commit.returncode:
        return None
    return commit.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def measure_copy_bandwidth(size_mb: int = 256, repeats: int = 10) -> dict[str, Any]:
    """Device-to-device copy bandwidth on the GPU if there is one, else host memcpy, in GB/s.
    A copy reads and writes every byte, so 2 * size bytes move per copy."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    nbytes = size_mb * 2**20
    # one warm-up copy: page faults and lazy allocation stay out of the timing
    seconds = copy_seconds(nbytes, device, warmup=1, repeats=repeats)
    return {"device": device.type, "copy_gb_per_s": 2 * nbytes / seconds / 1e9}


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
