"""`llmbench profile`: run the workload in a child `llmbench run` that profiles the chosen steps,
then fold what the profiler recorded into <out>/profile.json, which the report renders."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from llmbench.profiling import nsys
from llmbench.profiling.nsys_stats import load_stats
from llmbench.profiling.torch_profile import load_torch_summary
from llmbench.profiling.window import TOOLS, ProfileError, StepRange, window_env

logger = logging.getLogger(__name__)

PROFILE_FILE = "profile.json"
SCHEMA_VERSION = 1


def default_out_dir(config: Path, tool: str) -> Path:
    return Path("results") / f"{config.stem}-{tool}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def run_command(config: Path, out_dir: Path, overrides: list[str]) -> list[str]:
    command = [sys.executable, "-m", "llmbench", "run", str(config), "--out", str(out_dir)]
    for item in overrides:
        command += ["--set", item]
    return command


def profile_run(
    config: Path,
    tool: str,
    steps: StepRange,
    out_dir: Path | None = None,
    overrides: list[str] = (),
    extra_args: list[str] = (),
) -> Path:
    """Profile `steps` of the run `config` describes with `tool` ("nsys" or "torch"); returns
    the run directory holding profile.json next to the run's own results."""
    if tool not in TOOLS:
        raise ProfileError(f"unknown profiler {tool!r}: expected one of {', '.join(TOOLS)}")
    if extra_args and tool != "nsys":
        raise ProfileError("extra arguments after -- are passed to nsys; they need --nsys")
    if not config.is_file():
        raise ProfileError(f"{config}: no such config file")
    nsys_path = nsys.find_nsys() if tool == "nsys" else None
    out_dir = (out_dir or default_out_dir(config, tool)).resolve()

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
    write_profile(
        out_dir, {"schema_version": SCHEMA_VERSION, "tool": tool, "step_range": str(steps), **summary}
    )
    return out_dir


def write_profile(out_dir: Path, profile: dict) -> None:
    """Written atomically, like summary.json: a reader never sees half a file."""
    path = out_dir / PROFILE_FILE
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(profile, indent=1) + "\n")
    os.replace(temporary, path)
    logger.info("profile summary written to %s", path)


def load_profile(run_dir: Path) -> dict | None:
    """The run's profile.json, or None when the run was not profiled."""
    path = Path(run_dir) / PROFILE_FILE
    return json.loads(path.read_text()) if path.exists() else None
