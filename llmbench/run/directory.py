"""Who may write into a run directory: one run at a time, never on top of an earlier run's files unless
asked to replace them, and never a path that is a file or lies under one."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

# what a run writes (the report's files are rewritten by the next report; its plots are *.png)
RUN_FILES = ("summary.json", "requests.jsonl", "steps.csv", "config.yaml", "report.html")


class RunDirError(ValueError):
    """A run directory that cannot be used; the message is one line."""


def check_run_dir(run_dir: Path, replace: bool) -> None:
    """Refuse a path that is a file or lies under one, a name the file system cannot hold, a directory
    that cannot be written and, unless `replace`, one holding a run."""
    try:
        for path in (run_dir, *run_dir.parents):
            if path.exists() and not path.is_dir():
                where = "is a file" if path == run_dir else f"is under a file ({path})"
                raise RunDirError(f"{run_dir}: {where}; choose a directory")
        old = [name for name in RUN_FILES if (run_dir / name).exists()]
    except OSError as e:  # a name too long, a loop of links, a directory we may not search
        raise RunDirError(f"{run_dir}: unusable ({e.strerror}); choose another --out") from None
    if run_dir.is_dir():
        try:  # a read-only file system: said now, before the model loads, not when the first row is written
            tempfile.TemporaryFile(dir=run_dir).close()
        except OSError as e:
            raise RunDirError(f"{run_dir}: cannot write ({e.strerror}); choose another --out") from None
    if old and not replace:
        raise RunDirError(
            f"{run_dir} already holds a run ({', '.join(old)}); "
            "choose another --out (llmbench run --force replaces it)"
        )


def claim_run_dir(run_dir: Path, replace: bool) -> int:
    """Create and lock `run_dir` for this process, then clear an earlier run's files if `replace`.
    Returns the directory's descriptor: the lock (flock on the directory itself, so no lock file is
    left behind) holds until it is closed. The check runs again under the lock: another run may have
    written there since the command started."""
    check_run_dir(run_dir, replace)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(run_dir, os.O_RDONLY)
    except OSError as e:
        raise RunDirError(f"{run_dir}: cannot create ({e.strerror})") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        check_run_dir(run_dir, replace)
    except BlockingIOError:
        os.close(lock)
        raise RunDirError(f"{run_dir}: another run is writing into it; choose another --out") from None
    except RunDirError:
        os.close(lock)
        raise
    for path in [*(run_dir / name for name in RUN_FILES), *run_dir.glob("*.png")]:
        if path.is_file():
            os.unlink(path)
    return lock
