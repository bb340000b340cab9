"""What `llmbench ablate` and `llmbench sweep` share: a study runs one workload several ways, each an
ordinary `llmbench run` in a sub-directory of the study's directory, and keeps a JSON file (ablation.json,
sweep.json) that collects them, rewritten after every run so an interrupted study keeps what it measured."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmbench.backends.factory import make_backend
from llmbench.config.load import config_label
from llmbench.config.schema import RunConfig
from llmbench.engine.config import ConfigError
from llmbench.results.json_file import StudyFile
from llmbench.run.workload import WorkloadError

if TYPE_CHECKING:
    from llmbench.run.progress import Progress
    from llmbench.run.runner import RunResult


@dataclass
class StudyResult:
    out_dir: Path
    data: StudyFile  # the study's file, as written so far
    interrupted: bool = False


def run_point(
    config: RunConfig, config_path: Path, run_dir: Path, progress: Progress | None, error: type[Exception]
) -> RunResult:
    """One run of the study; model settings the backend cannot use (preset, path, device) and a workload
    it cannot build (dataset, lengths) raise `error` naming the config file, as `llmbench run` does."""
    # the runner brings torch and the engine: imported once a run is due, so a study's config errors
    # are reported without them
    from llmbench.run.runner import run_benchmark

    try:
        backend = make_backend(config)
    except ValueError as e:
        raise error(f"{config_label(config_path)}: {e}") from None
    try:
        return run_benchmark(config, run_dir, backend=backend, progress=progress)
    except (ConfigError, WorkloadError) as e:
        raise error(f"{config_label(config_path)}: {e}") from None
