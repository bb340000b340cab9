"""The two nsys invocations: `nsys profile` around a child `llmbench run`, limited to the steps
between cudaProfilerStart and cudaProfilerStop, then `nsys stats` writing CSV tables to parse."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from llmbench.profiling.nsys_stats import REPORTS
from llmbench.profiling.steps import ProfileError

logger = logging.getLogger(__name__)

NSYS_HINT = "nsys not found: install Nsight Systems or use --torch"
REPORT_NAME = "profile"  # <out>/profile.nsys-rep
STATS_PREFIX = "nsys"  # <out>/nsys_<report>.csv


def find_nsys() -> str:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise ProfileError(NSYS_HINT)
    return nsys


def profile_command(nsys: str, out_dir: Path, run_command: list[str], extra_args: list[str]) -> list[str]:
    return [
        nsys,
        "profile",
        "--trace=cuda,nvtx,osrt",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        # kernels inside CUDA graphs listed one by one, not as one opaque graph launch
        "--cuda-graph-trace=node",
        # tensor-parallel workers are child processes of the run: trace them too
        "--trace-fork-before-exec=true",
        "--force-overwrite=true",
        f"--output={out_dir / REPORT_NAME}",
        *extra_args,
        *run_command,
    ]


def stats_command(nsys: str, report: Path, prefix: Path) -> list[str]:
    reports = ",".join(REPORTS)
    return [
        nsys,
        "stats",
        "--report",
        reports,
        "--format",
        "csv",
        "--force-export",
        "true",
        "--output",
        str(prefix),
        str(report),
    ]


def run_stats(nsys: str, out_dir: Path) -> Path:
    """Export the stats tables of <out>/profile.nsys-rep; returns the CSV prefix."""
    report = out_dir / f"{REPORT_NAME}.nsys-rep"
    if not report.exists():
        raise ProfileError(f"nsys wrote no {report.name}: did --steps start beyond the run's last step?")
    prefix = out_dir / STATS_PREFIX
    command = stats_command(nsys, report, prefix)
    logger.info("running %s", " ".join(command))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return prefix
