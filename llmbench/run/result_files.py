"""A run directory's files: requests.jsonl, steps.csv and config.yaml written as the run goes (summary.json
is run/summary.py's; the atomic write and steps.csv read back are results/files.py's).

Per-request and per-step rows are appended and flushed as they come (the requests one poll finished
together), so a crash or Ctrl-C keeps everything measured so far; whole files (summary, config) are
replaced atomically."""

from __future__ import annotations

import csv
import dataclasses
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from llmbench.metrics.steps import StepCosts, derived_columns
from llmbench.results.files import write_atomic
from llmbench.results.records import RequestRecord
from llmbench.results.summary import RunSummary
from llmbench.run.directory import claim_run_dir

_STEP_TIMES = ("t_start", "t_end", "gpu_start", "gpu_end")  # perf_counter seconds in StepRecords


def default_run_dir(name: str, root: str | Path = "runs") -> Path:
    """root/NAME-TIME, one directory whatever slashes the name holds (a sweep's "ci @ 40 req/s")."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    safe = name.replace("/", "_").replace("\\", "_")
    return Path(root) / f"{safe}-{stamp}"


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

    def write_summary(self, summary: RunSummary) -> None:
        summary.save(self.run_dir / "summary.json")

    def close(self) -> None:
        self._requests.close()
        self._steps_file.close()
        os.close(self._lock)
