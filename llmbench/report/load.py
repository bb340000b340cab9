"""Read a run directory into what the report draws. A run cut short (no summary.json, or
complete=false) has its metrics recomputed from requests.jsonl and steps.csv, and is marked incomplete."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import numpy as np
import yaml

from llmbench.config.schema import OutputConfig, SloConfig
from llmbench.metrics.requests import compute_metrics, latency_samples, median_metrics
from llmbench.metrics.steps import summarize_steps
from llmbench.results.ablation import Ablation
from llmbench.results.json_file import ResultFileError, StudyFile
from llmbench.results.metrics import Metrics
from llmbench.results.records import RequestRecord
from llmbench.results.summary import SCHEMA_VERSION, RunSummary
from llmbench.results.sweep import Sweep

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

_RECORD_FIELDS = {f.name for f in dataclasses.fields(RequestRecord)}
S = TypeVar("S", bound=StudyFile)


class ReportError(ValueError):
    """A run directory the report cannot read: exit code 2."""


@dataclass
class RunData:
    path: Path
    summary: RunSummary  # summary.json's, or rebuilt from the row files
    complete: bool
    requests: list[RequestRecord]  # requests.jsonl rows, warm-up left out
    steps: pd.DataFrame | None  # steps.csv, None when absent or empty
    ablation: Ablation | None  # ablation.json when `llmbench ablate` wrote one
    sweep: Sweep | None  # sweep.json when `llmbench sweep` wrote one
    # ttft, tpot, e2el per request and itl per gap, in ms; with reasoning, ttfo and each phase's gaps
    samples: dict[str, np.ndarray]
    token_times: np.ndarray  # every measured output-token arrival, seconds since run start
    label: str = ""

    @property
    def name(self) -> str:
        return self.summary.name or self.path.name

    @property
    def metrics(self) -> Metrics | None:
        return self.summary.metrics

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.label or self.name)

    @property
    def has_gpu_timing(self) -> bool:
        return self.steps is not None and "gpu_ms" in self.steps and bool(self.steps["gpu_ms"].notna().any())


def load_run(path: Path) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: not a run directory")
    summary = _read_summary(path / "summary.json")
    requests = _read_requests(path / "requests.jsonl")
    if summary is None and requests is None:
        raise ReportError(f"{path}: neither summary.json nor requests.jsonl found")
    steps = _read_steps(path / "steps.csv")
    complete = bool(summary and summary.complete and summary.metrics)
    records = [r for r in requests or [] if not r.warmup]
    if not complete:
        log.warning("%s: incomplete run, metrics recomputed from its row files", path)
        summary = _rebuild_summary(path, summary, records, steps)
    samples = {
        key: np.asarray(values, dtype=float) * 1000 for key, values in latency_samples(records).items()
    }
    token_times = np.asarray([t for r in records if r.succeeded for t in r.token_times], dtype=float)
    return RunData(
        path=path,
        summary=summary,
        complete=complete,
        requests=records,
        steps=steps,
        ablation=read_study(path, Ablation),
        sweep=read_study(path, Sweep),
        samples=samples,
        token_times=token_times,
    )


def load_runs(paths: list[Path]) -> list[RunData]:
    """Load several runs; labels are config names, made unique with the directory name if needed."""
    runs = [load_run(p) for p in paths]
    names = [run.name for run in runs]
    for run in runs:
        run.label = run.name if names.count(run.name) == 1 else f"{run.name} ({run.path.name})"
    return runs


def read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return data


def read_study(path: Path, type_: type[S]) -> S | None:
    """A study's file in directory `path` (an older file migrated), None where there is none."""
    if not (path / type_.FILE).is_file():
        return None
    try:
        return type_.load(path)
    except ResultFileError as e:
        raise ReportError(str(e)) from None


def _read_summary(path: Path) -> RunSummary | None:
    """summary.json read as a RunSummary (an older file migrated)."""
    if not path.is_file():
        return None
    try:
        return RunSummary.load(path)
    except ResultFileError as e:
        raise ReportError(str(e)) from None


def _read_requests(path: Path) -> list[RequestRecord] | None:
    if not path.is_file():
        return None
    rows = []
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            row = None
        if isinstance(row, dict):
            rows.append(_record(row))
        elif number == len(lines):
            # each row is written with its newline: a run killed mid-write leaves a torn last line
            log.warning("%s:%d: torn last request row skipped", path, number)
        else:
            raise ReportError(f"{path}:{number}: not a request row (a JSON object per line)")
    return rows


def _read_steps(path: Path) -> pd.DataFrame | None:
    import pandas as pd  # here: a report on runs that cannot be read fails without loading it

    if not path.is_file():
        return None
    try:
        steps = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return steps if len(steps) and {"step", "t_start", "t_end"} <= set(steps.columns) else None


def _record(row: dict[str, Any]) -> RequestRecord:
    return RequestRecord(**{k: v for k, v in row.items() if k in _RECORD_FIELDS})


def _rebuild_summary(
    path: Path, summary: RunSummary | None, records: list[RequestRecord], steps: pd.DataFrame | None
) -> RunSummary:
    """The summary of a run cut short, from its rows: the file's where there is one, its metrics and
    steps recomputed."""
    # the config as the user wrote it (config.yaml when no summary holds it): an open mapping
    config = (summary.config if summary else None) or _read_config(path / "config.yaml")
    output = config.get("output") or {}
    percentiles = output.get("percentiles") or OutputConfig().percentiles
    slo = _slo(config.get("slo"))
    trial_ids = sorted({r.trial for r in records})
    trials = [compute_metrics([r for r in records if r.trial == t], percentiles, slo) for t in trial_ids]
    if steps is not None and "num_steps" in steps and steps["num_steps"].isna().any():
        # a row cut short when the run was killed: how many forwards the steps ran is unknown
        raise ReportError(f"{path / 'steps.csv'}: a row without num_steps")
    rebuilt_steps = summarize_steps(steps.to_dict("records") if steps is not None else [], config)
    if summary is None:
        summary = RunSummary(
            schema_version=SCHEMA_VERSION,
            name="",
            complete=False,
            config=config,
            metrics=None,
            steps=rebuilt_steps,
        )
    return msgspec.structs.replace(
        summary,
        name=summary.name or config.get("name") or path.name,
        complete=False,
        config=config,
        metrics=median_metrics(trials) if trials else compute_metrics([], percentiles, slo),
        steps=rebuilt_steps,
        trials=trials if len(trials) > 1 else summary.trials,
    )


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        log.warning("%s: unreadable, using default percentiles and no SLOs", path)
        return {}
    return config if isinstance(config, dict) else {}


def _slo(section: Any) -> SloConfig | None:
    try:
        return SloConfig(**section) if isinstance(section, dict) else None
    except (TypeError, ValueError):
        return None
