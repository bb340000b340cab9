"""Request traces read row by row: Mooncake's JSONL and BurstGPT's CSV.

Mooncake (github.com/kvcache-ai/Mooncake, FAST'25 traces): one JSON object a line with `timestamp` (ms
since the trace began), `input_length`, `output_length` and `hash_ids`, where each id stands for one
512-token block of the prompt and requests that list the same id share that block.
BurstGPT (github.com/HPMLL/BurstGPT): a CSV with a header holding at least `Timestamp` (s), `Request
tokens` and `Response tokens`; its rows with 0 tokens either way are requests that failed in the
original service, and are skipped.

A trace is read only as far as the run needs, so a multi-million-row file costs what its head costs.
A row that cannot be read is an error naming the file and the line."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MOONCAKE_BLOCK_TOKENS = 512  # the tokens one Mooncake hash id stands for
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(ValueError):
    """A trace file that cannot be read, or a row of it that is malformed (path:line: what)."""


@dataclass(frozen=True)
class TraceRow:
    line: int  # in the file, 1-based, for messages
    time_s: float  # as the trace stamps it, in seconds
    input_length: int
    output_length: int
    hash_ids: list[int] = field(default_factory=list)  # Mooncake's shared prompt blocks, in order


def read_trace(kind: str, path: str | Path) -> Iterator[TraceRow]:
    """The usable rows of a `mooncake` or `burstgpt` trace, in file order; times never decrease."""
    path = Path(path).expanduser()
    rows = _mooncake(path) if kind == "mooncake" else _burstgpt(path)
    last = -math.inf
    try:
        for row in rows:
            if row.time_s < last:
                raise TraceError(
                    f"{path}:{row.line}: timestamp goes back in time ({row.time_s:g} s after {last:g} s)"
                )
            last = row.time_s
            yield row
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (offset {e.start})") from None


def _mooncake(path: Path) -> Iterator[TraceRow]:
    with path.open(encoding="utf-8") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            where = f"{path}:{number}"
            try:
                entry = json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                raise TraceError(f"{where}: not a JSON object") from None
            if not isinstance(entry, dict):
                raise TraceError(f"{where}: expected a JSON object, got {type(entry).__name__}")
            hash_ids = entry.get("hash_ids", [])
            if not isinstance(hash_ids, list) or not all(_is_int(h) and h >= 0 for h in hash_ids):
                raise TraceError(f"{where}: hash_ids: expected a list of integers >= 0")
            yield TraceRow(
                number,
                _number(entry.get("timestamp"), where, "timestamp") / 1000,
                _count(entry.get("input_length"), where, "input_length"),
                _count(entry.get("output_length"), where, "output_length"),
                hash_ids,
            )


def _burstgpt(path: Path) -> Iterator[TraceRow]:
    with path.open(encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file)
        missing = [c for c in BURSTGPT_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: the header lacks {', '.join(repr(c) for c in missing)}")
        for entry in reader:
            where = f"{path}:{reader.line_num}"
            values = [_parse(entry.get(column), where, column) for column in BURSTGPT_COLUMNS]
            time_s, request, response = values
            if not (_is_int(request) and _is_int(response)) or request < 0 or response < 0:
                raise TraceError(f"{where}: token counts must be integers >= 0")
            if request and response:
                yield TraceRow(reader.line_num, time_s, request, response)


def _parse(text: str | None, where: str, column: str) -> float | int:
    if text is None:
        raise TraceError(f"{where}: {column}: missing")
    try:
        value = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise TraceError(f"{where}: {column}: expected a number, got {text[:40]!r}") from None
    return _number(value, where, column)


def _number(value: object, where: str, key: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0:
        raise TraceError(f"{where}: {key}: expected a number >= 0, got {str(value)[:40]}")
    return value


def _count(value: object, where: str, key: str) -> int:
    if not _is_int(value) or value < 1:
        raise TraceError(f"{where}: {key}: expected an integer >= 1, got {str(value)[:40]}")
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
