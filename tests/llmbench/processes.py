"""An llmbench command run as its own process and stopped the way a CI runner or a batch scheduler
stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).parents[2]


def sigterm_after_first_row(args: list[str], rows: Path) -> int:
    """Runs `python -m llmbench *args` from the checkout, sends SIGTERM once `rows` (a requests.jsonl)
    holds a finished request, and returns the exit code."""
    command = [sys.executable, "-m", "llmbench", *args]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120  # the interpreter and torch load first on a loaded host
        while not (rows.exists() and rows.stat().st_size):
            assert time.monotonic() < deadline and process.poll() is None, "no request finished"
            time.sleep(0.2)
        os.kill(process.pid, signal.SIGTERM)
        return process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
