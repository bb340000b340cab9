"""The run directory: summary.json, requests.jsonl, steps.csv and config.yaml.

Per-request and per-step rows are appended and flushed as they come (the requests one poll finished
together), so a crash or Ctrl-C keeps everything measured so far; whole files (summary, config) are
replaced atomically."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec
import yaml

from llmbench.run_dir import claim_run_dir
from llmbench.step_stats import StepCosts, derived_columns

SCHEMA_VERSION = 1
# a finished request's row is written between engine steps, and in a load that ends together dozens
# finish in one step: msgspec encodes a 256-token row in ~10 us, json.dumps in ~65 (2-core CPU)
_ROW_ENCODER = msgspec.json.Encoder()
_STEP_TIMES = ("t_start", "t_end", "gpu_start", "gpu_end")  # perf_counter seconds in StepRecords


# Slotted: the runner adds each poll's token to every running request's record between engine steps,
# where a synchronous engine's GPU waits for it; a slotted record is one memory block, not two.
@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it. Times are seconds relative to the run start."""

    id: str
    trial: int
    warmup: bool
    prompt_len: int
    output_len: int = 0
    submit_time: float = 0.0
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)  # a chunk of k tokens repeats its time k times
    finish_reason: str | None = None  # None: still running when the run stopped
    finish_time: float | None = None  # when the client saw it end: last token, error, abort or stop
    error: str | None = None
    prompt_token_ids: list[int] | None = None
    output_token_ids: list[int] | None = None
    prompt: str | None = None  # a dataset prompt's text (with save_tokens)
    # the engine's own times for the request when the server is ours (llmbench serve), run-relative
    server_timestamps: dict[str, Any] | None = None

    @property
    def succeeded(self) -> bool:
        return self.finish_reason in ("stop", "length") and self.output_len > 0

    def to_json(self, save_tokens: bool) -> str:
        # a shallow copy: dataclasses.asdict deep-copies token_times float by float (~1.1 ms of the
        # 1.3 ms a 512-token request took), on the runner's thread between engine steps
        data = self.fields_dict()
        if not save_tokens:
            del data["prompt_token_ids"], data["output_token_ids"], data["prompt"]
        if data["server_timestamps"] is None:  # only a served run has them
            del data["server_timestamps"]
        return _ROW_ENCODER.encode(data).decode()

    def fields_dict(self) -> dict[str, Any]:
        """Every field by name, as a new dict holding the same values (the lists are not copied)."""
        return {name: getattr(self, name) for name in _RECORD_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))


def default_run_dir(name: str, root: str | Path = "results") -> Path:
    """root/NAME-TIME, one directory whatever slashes the name holds (a sweep's "ci @ 40 req/s")."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    safe = name.replace("/", "_").replace("\\", "_")
    return Path(root) / f"{safe}-{stamp}"


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


class ResultWriter:
    """Streams one run's rows to disk as they arrive, holding the run directory's lock until close().
    `replace`: an earlier run's files there are removed first, else they make it a RunDirError."""

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        run_start: float,
        save_tokens: bool,
        replace: bool = False,
    ):
        self.run_dir = Path(run_dir)
        self._lock = claim_run_dir(self.run_dir, replace)
        self.run_start = run_start
        self.save_tokens = save_tokens
        write_atomic(self.run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        self._requests = open(self.run_dir / "requests.jsonl", "w", encoding="utf-8")
        self._steps_file = open(self.run_dir / "steps.csv", "w", newline="")
        self._steps: Any = None  # a csv writer, once the first step names the columns
        self._costs = StepCosts.from_run_config(config)

    def add_requests(self, records: list[RequestRecord]) -> None:
        """Rows of requests that finished together, in one write and one flush: on the H200 decode
        load, whose last steps end 64 requests each, a flush a row left the GPU idle 9-19 ms a step."""
        self._requests.write("".join(record.to_json(self.save_tokens) + "\n" for record in records))
        self._requests.flush()

    def add_steps(self, step_records: list, trial: int) -> None:
        """Append engine StepRecords, with their perf_counter times made relative to the run start,
        and the derived per-step columns (CPU ms, MBU, MFU)."""
        if not step_records:
            return
        if self._steps is None:
            self._steps = csv.writer(self._steps_file)
            names = ["trial"] + [f.name for f in dataclasses.fields(step_records[0])]
            self._steps.writerow(names + list(derived_columns({}, None)))
        # this runs between engine steps, on the runner's thread: a plain copy of the record's fields,
        # not dataclasses.asdict (a deep copy, ~55 us a step), keeps the pause short
        for record in step_records:
            row = vars(record).copy()
            for key in _STEP_TIMES:
                row[key] -= self.run_start
            row.update(derived_columns(row, self._costs))
            self._steps.writerow([trial, *row.values()])
        self._steps_file.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")

    def close(self) -> None:
        self._requests.close()
        self._steps_file.close()
        os.close(self._lock)


def nothing_completed(trial_metrics: list[dict[str, Any]]) -> str | None:
    """Why a finished run counts as failed: no timed request of any trial completed."""
    if any(m["completed"] for m in trial_metrics):
        return None
    failed = sum(m["failed"] for m in trial_metrics)
    return f"no request completed ({failed} failed; see the error column of requests.jsonl)"


def build_summary(
    name: str,
    complete: bool,
    started_at: str,
    config: dict[str, Any],
    environment: dict[str, Any],
    trials: list[dict[str, Any]],
    steps: dict[str, Any],
) -> dict[str, Any]:
    """summary.json's content; with several trials, `metrics` is the per-metric median over them."""
    from llmbench.metrics import median_over_trials

    summary = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "complete": complete,
        "started_at": started_at,
        "config": config,
        "environment": environment,
        "metrics": median_over_trials(trials) if trials else {},
        "steps": steps,
    }
    if len(trials) > 1:
        summary["trials"] = trials
    return summary


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def load_requests(run_dir: str | Path) -> list[RequestRecord]:
    lines = (Path(run_dir) / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]


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
