"""profile.json in a run directory: what `llmbench profile` found, kept next to summary.json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmbench.results.files import write_atomic

logger = logging.getLogger(__name__)

PROFILE_FILE = "profile.json"
SCHEMA_VERSION = 1


def write_profile(run_dir: Path, profile: dict) -> Path:
    """Written atomically, like summary.json: a reader never sees half a file."""
    path = Path(run_dir) / PROFILE_FILE
    write_atomic(path, json.dumps({"schema_version": SCHEMA_VERSION, **profile}, indent=1) + "\n")
    logger.info("profile summary written to %s", path)
    return path


def load_profile(run_dir: Path) -> dict | None:
    """The run's profile.json, or None when the run was not profiled."""
    path = Path(run_dir) / PROFILE_FILE
    return json.loads(path.read_text()) if path.exists() else None
