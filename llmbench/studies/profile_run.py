"""`llmbench profile`: run the workload in a child `llmbench run` that profiles the chosen steps,
then fold what the profiler recorded into <out>/profile.json, which the command's report renders."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from llmbench.config.load import load_config
from llmbench.profiling import nsys
from llmbench.profiling.nsys_stats import load_stats
from llmbench.profiling.profile_file import write_profile
from llmbench.profiling.steps import TOOLS, ProfileError, StepRange, window_env
from llmbench.profiling.torch_profile import load_torch_summary

logger = logging.getLogger(__name__)


def default_out_dir(config: Path, tool: str) -> Path:
    return Path("runs") / f"{config.stem}-{tool}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def run_command(config: Path, out_dir: Path, overrides: list[str]) -> list[str]:
    command = [sys.executable, "-m", "llmbench", "run", str(config), "--out", str(out_dir)]
    # the report is drawn once, after profile.json exists
    for item in [*overrides, "output.report=false"]:
        command += ["--set", item]
    return command


def profile_run(
    config: Path,
    tool: str,
    steps: StepRange,
    out_dir: Path | None = None,
    overrides: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> Path:
    """Profile `steps` of the run `config` describes with `tool` ("nsys" or "torch"); returns
    the run directory holding profile.json next to the run's own results."""
    if tool not in TOOLS:
        raise ProfileError(f"unknown profiler {tool!r}: expected one of {', '.join(TOOLS)}")
    if extra_args and tool != "nsys":
        raise ProfileError("extra arguments after -- are passed to nsys; they need --nsys")
    load_config(config, list(overrides))  # a config mistake stops here, before any profiler
    nsys_path = nsys.find_nsys() if tool == "nsys" else None
    out_dir = (out_dir or default_out_dir(config, tool)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    command = run_command(config, out_dir, list(overrides))
    if tool == "nsys":
        command = nsys.profile_command(nsys_path, out_dir, command, list(extra_args))
    logger.info("running %s", " ".join(command))
    env = {**os.environ, **window_env(tool, steps, out_dir)}
    returncode = subprocess.run(command, env=env).returncode
    if returncode != 0:
        raise RuntimeError(f"the profiled run failed with exit code {returncode}")

    if tool == "nsys":
        summary = load_stats(nsys.run_stats(nsys_path, out_dir))
    else:
        summary = load_torch_summary(out_dir)
    # the profiling command itself: the run's summary.json names only the child `llmbench run`
    from llmbench.device.environment import command_line  # torch: the child's run has finished

    write_profile(out_dir, {"tool": tool, "step_range": str(steps), "command": command_line(), **summary})
    return out_dir
