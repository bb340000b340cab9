"""What every result file shares: the atomic write that whole files (summary.json, config.yaml, a study's
JSON, profile.json) go through, and steps.csv read back into rows."""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and os.replace, so readers never see half a file.
    The file gets the permissions open() would give it (0666 less the umask), not mkstemp's 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    # the only way to read the umask is to set it; put straight back
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def load_steps(run_dir: str | Path) -> list[dict[str, Any]]:
    """steps.csv rows with numbers parsed (empty file: no rows)."""
    with open(Path(run_dir) / "steps.csv", newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _number(text: str) -> Any:
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)
