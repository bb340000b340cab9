"""What one report page shows, gathered from the directories given: runs, studies (an ablation's
variants, a sweep's rates, each point read from its own run directory when it is there) and, for a
directory of collected result files such as docs/measurements/h200, each file recognised by its content."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmbench.report.load import ReportError, RunData, load_run, load_runs, read_json, read_study
from llmbench.results.ablation import Ablation, Toggles, Variant
from llmbench.results.json_file import ResultFileError, known
from llmbench.results.metrics import Metrics
from llmbench.results.steps import Steps
from llmbench.results.summary import RunSummary
from llmbench.results.sweep import Point as SweepPoint
from llmbench.results.sweep import Sweep

log = logging.getLogger(__name__)

STUDY_DIR_FILES = {"ablation.json", "sweep.json", "summary.json", "profile.json"}
STUDIES: dict[str, type[Ablation] | type[Sweep]] = {"ablation": Ablation, "sweep": Sweep}
# the kinds of result file read as their declared type
TYPES: dict[str, type[Ablation] | type[Sweep] | type[RunSummary]] = {**STUDIES, "run": RunSummary}


@dataclass
class Point:
    """One bar or row of a comparison: a run, an ablation variant or a sweep rate."""

    label: str
    metrics: Metrics | None  # None: no trial finished
    steps: Steps
    run: RunData | None = None  # its run directory, when it was found
    trials: list[Metrics] = field(default_factory=list)  # per-trial metrics, when repeated
    toggles: Toggles = field(default_factory=dict)


@dataclass
class Group:
    """Points compared side by side; `kind` is "runs", "ablation" or "sweep"."""

    title: str
    kind: str
    points: list[Point]
    data: Ablation | Sweep | None = None  # the study's file


@dataclass
class ResultFile:
    """A JSON file of a results directory that is neither a run summary nor a study."""

    name: str
    kind: str  # "run", "profile", "decode", "kernels", "agreement", "overview" or "other"
    data: dict[str, Any]
    summary: RunSummary | None = None  # a run summary's, read as one


@dataclass
class Page:
    title: str
    runs: list[RunData]  # run directories (a study's own directory included): header, requests, config
    groups: list[Group]
    files: list[ResultFile] = field(default_factory=list)
    figures: list[tuple[Path, str]] = field(default_factory=list)  # PNGs to embed
    notes: list[str] = field(default_factory=list)

    @property
    def points(self) -> list[Point]:
        return [p for g in self.groups for p in g.points]


def run_point(run: RunData) -> Point:
    summary = run.summary
    return Point(run.label, summary.metrics, summary.steps, run, known(summary.trials) or [])


def study_group(path: Path, data: Ablation | Sweep, title: str) -> Group:
    kind = "ablation" if isinstance(data, Ablation) else "sweep"
    entries: list[Variant] | list[SweepPoint] = data.variants if isinstance(data, Ablation) else data.points
    points, seen = [], set()
    for entry in entries:
        run_dir = path / entry.run_dir
        # all on repeats the last variant's directory: its rows are drawn once
        found = entry.run_dir and run_dir.is_dir() and run_dir not in seen
        run = load_run(run_dir) if found else None
        seen.add(run_dir)
        if isinstance(entry, Variant):
            label, toggles = entry.name, entry.toggles
            trials = [t.metrics for t in known(entry.trials) or [] if t.metrics is not None]
        else:
            label, toggles, trials = f"{entry.label} req/s", {}, []
        if run is not None:
            run.label = label
        points.append(Point(label, entry.metrics, entry.steps, run, trials, toggles))
    return Group(title, kind, points, data)


def _is_run_dir(path: Path) -> bool:
    summary = path / "summary.json"
    if (path / "requests.jsonl").is_file():
        return True
    return summary.is_file() and "metrics" in (read_json(summary) or {})


def _collected(path: Path) -> bool:
    """A directory of collected result files (docs/measurements/h200) rather than a study's own directory,
    which holds only its study file and summary.json beside the runs' sub-directories."""
    return any(f.name not in STUDY_DIR_FILES for f in path.glob("*.json"))


def classify(data: dict[str, Any]) -> str:
    """What a result file holds, from the keys its writer always sets."""
    # an ablation's variants and a sweep's points are lists; the H200 serving and sampling files key
    # their variants and points by name, and are shown as files
    if isinstance(data.get("variants"), list):
        return "ablation"
    if isinstance(data.get("points"), list):
        return "sweep"
    if "metrics" in data and "config" in data:
        return "run"
    if data.get("tool") in ("nsys", "torch"):
        return "profile"
    if "wall_ms_per_token" in data:
        return "decode"
    if isinstance(data.get("kernels"), list):
        return "kernels"
    if "token_agreement" in data:
        return "agreement"
    if any(isinstance(v, dict) and "command" in v for v in data.values()):
        return "overview"
    return "other"


def _results_dir(path: Path, page: Page) -> None:
    """A directory of collected result files: studies and run summaries become groups, the rest files."""
    runs = []
    for file in sorted(path.glob("*.json")):
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("%s: not JSON, left out of the report", file)
            continue
        if not isinstance(data, dict):
            continue
        kind = classify(data)
        try:
            typed = TYPES[kind].from_dict(data, file) if kind in TYPES else None
        except ResultFileError as e:
            log.warning("%s; shown as a file", e)
            kind, typed = "other", None
        if isinstance(typed, Ablation | Sweep):
            page.groups.append(study_group(path, typed, f"{kind.capitalize()}: {file.name}"))
        elif isinstance(typed, RunSummary):
            trials = known(typed.trials) or []
            runs.append(Point(file.stem, typed.metrics, typed.steps, None, trials))
            page.files.append(ResultFile(file.name, kind, data, typed))
        else:
            page.files.append(ResultFile(file.name, kind, data))
    if runs:
        page.groups.insert(0, Group("Runs", "runs", runs))
    if not page.groups and not page.files:
        raise ReportError(f"{path}: neither summary.json nor requests.jsonl found")


def build_page(paths: list[Path]) -> Page:
    """The page for the directories given: each a run, a study (ablation.json / sweep.json) or a
    directory of result files."""
    page = Page(title="", runs=[], groups=[])
    plain, collected, study_runs = [], [], []
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path}: not a run directory")
        study = next(
            (
                (k, f)
                for k, f in (("ablation", "ablation.json"), ("sweep", "sweep.json"))
                if (path / f).is_file()
            ),
            None,
        )
        if study is not None and not _collected(path):
            kind, name = study
            data = read_study(path, STUDIES[kind])
            run = load_run(path) if _is_run_dir(path) else None
            title = f"{kind.capitalize()} of {run.name if run else path.name}"
            group = study_group(path, data, title)
            page.groups.append(group)
            if run is not None:
                run.label = run.name
                page.runs.append(run)
                study_runs.append(run)
            elif group.points and group.points[-1].run is not None:
                page.runs.append(group.points[-1].run)
        elif _is_run_dir(path):
            plain.append(path)
        else:
            _results_dir(path, page)
            collected.append(f"{path.name} (result files)")
    if plain:
        runs = load_runs(plain)
        page.runs = runs + page.runs
        page.groups.insert(0, Group("Runs" if len(runs) > 1 else "Run", "runs", [run_point(r) for r in runs]))
    studies = [g.title for g in page.groups if g.kind != "runs" and not collected]
    names = [r.label for r in page.runs if r not in study_runs] + studies + collected
    page.title = "llmbench report: " + ", ".join(names)
    return page
