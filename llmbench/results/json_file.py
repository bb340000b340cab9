"""Reading and writing a result file that is one JSON object with a schema_version: the checks every
such file gets on the way in (valid JSON, an object, a version this code knows), and the one format
they are written in (indent 2, a final newline, key order as declared)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Self

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
    data: dict[str, Any],
    path: Path,
    what: str,
    version: int,
    steps: dict[int, Callable[[dict], dict]],
    unversioned: int = 1,
) -> dict[str, Any]:
    """`data` brought up to `version`: steps[v] turns a version-v file into v+1. A file without a
    schema_version is version `unversioned`: the summary's first version had none; the study files
    written before they were declared are version 0."""
    found = data.get("schema_version", unversioned)
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


def known(value: Any) -> Any:
    """A field's value, None where the file left it out (UNSET)."""
    return None if value is msgspec.UNSET else value


def write(path: Path, data: dict[str, Any]) -> None:
    write_atomic(Path(path), json.dumps(data, indent=2) + "\n")


class StudyFile(msgspec.Struct, kw_only=True):
    """A study's JSON file (ablation.json, sweep.json, capacity.json, calibrate.json) as a declared type:
    schema_version first, then the subclass's fields in the file's key order. A subclass names its file
    and version, the steps from each older version, and how a metrics object changes shape between the
    file (flat) and the type (`file_shape`, `type_shape`)."""

    schema_version: int = 1

    FILE: ClassVar[str]
    WHAT: ClassVar[str]
    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[dict[int, Callable[[dict], dict]]] = {}

    def __post_init__(self) -> None:
        # what is built or loaded (migrated first) is this version, whatever a subclass's VERSION
        self.schema_version = self.VERSION

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """A study directory's file, or the file itself; an older file is migrated first."""
        path = Path(path)
        file = path / cls.FILE if path.is_dir() else path
        return cls.from_dict(read_object(file, cls.WHAT), file)

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Path | str | None = None) -> Self:
        path = Path(path or cls.FILE)
        try:
            shaped = cls.type_shape(migrate(data, path, cls.WHAT, cls.VERSION, cls.MIGRATIONS, unversioned=0))
        except (AttributeError, KeyError, TypeError):  # a list or object where the other was due
            raise ResultFileError(f"{path}: not an llmbench {cls.WHAT} (unexpected shape)") from None
        return convert(shaped, cls, path, cls.WHAT)

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object."""
        return self.file_shape(msgspec.to_builtins(self))

    def save(self, path: str | Path) -> None:
        """Written atomically: a reader never sees half a file, and an interrupted study keeps the last."""
        write(Path(path), self.to_dict())

    @classmethod
    def type_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return data

    @classmethod
    def file_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return data
