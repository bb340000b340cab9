"""Reading and writing a result file that is one JSON object with a schema_version: the checks every
such file gets on the way in (valid JSON, an object, a version this code knows), and the one format
they are written in (indent 2, a final newline, key order as declared)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from llmbench.results.files import write_atomic


class ResultFileError(ValueError):
    """A file that is not the result file asked for, or one from a newer llmbench: exit code 2."""


def read_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in `path`; `what` names the file kind in the error ("summary", "ablation")."""
    try:
        data = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultFileError(f"{path}: not an llmbench {what} (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise ResultFileError(f"{path}: not an llmbench {what} (not a JSON object)")
    return data


def migrate(
    data: dict[str, Any], path: Path, what: str, version: int, steps: dict[int, Callable[[dict], dict]]
) -> dict[str, Any]:
    """`data` brought up to `version`: steps[v] turns a version-v file into v+1. A file without a
    schema_version is version 1, the first."""
    found = data.get("schema_version", 1)
    if not isinstance(found, int) or found > version:
        raise ResultFileError(
            f"{path}: {what} schema_version {found!r} is newer than this llmbench reads ({version})"
        )
    for v in range(found, version):
        data = steps[v](data)
    return {**data, "schema_version": version}


def convert(data: dict[str, Any], type_: type, path: Path, what: str) -> Any:
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as e:
        raise ResultFileError(f"{path}: not an llmbench {what} ({e})") from None


def write(path: Path, data: dict[str, Any]) -> None:
    write_atomic(Path(path), json.dumps(data, indent=2) + "\n")
