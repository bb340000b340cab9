"""ablation.json: `llmbench ablate`'s variants, each with its medians over its trials, their intervals,
its toggle's effect and every trial's own figures (llmbench/studies/ablation.py writes it). Field order
is the file's key order; `metrics` objects are flat in the file, as in summary.json."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from llmbench.results.json_file import StudyFile
from llmbench.results.metrics import Metrics, file_metrics, type_metrics
from llmbench.results.steps import Steps, renamed_keys

Toggles = dict[str, bool | int | str]  # engine toggle -> its setting in a variant


class Trial(msgspec.Struct):
    """One trial of a variant: its run directory and what it measured."""

    trial: int
    run_dir: str
    metrics: Metrics | None  # None (`{}` in the file): no trial finished
    steps: Steps


class Intervals(msgspec.Struct):
    """95% bootstrap intervals of the median over a variant's trials; None unless every trial has one."""

    output_throughput: list[float] | None
    mean_cpu_ms_per_step: list[float] | None


class Effect(msgspec.Struct, kw_only=True):
    """Output throughput of a variant over the one it changes, with a bootstrap interval of the ratio
    (None with a single trial a side)."""

    against: str
    ratio: float
    ci: list[float] | None
    within_noise: bool | None


class Variant(msgspec.Struct, kw_only=True):
    name: str  # "all off", "+async_output", "-cuda_graphs", "all on"
    toggles: Toggles
    metrics: Metrics | None  # medians over the trials
    steps: Steps
    run_dir: str  # the trial at the median throughput
    intervals: Intervals | UnsetType = UNSET  # absent from files written before repeated trials
    trials: list[Trial] | UnsetType = UNSET
    vs_previous: Effect | UnsetType = UNSET  # "+x" against the variant before, "-x" against all on


class Ablation(StudyFile, kw_only=True):
    FILE = "ablation.json"
    WHAT = "ablation"

    command: str
    preset: str = "all"
    fixed: Toggles = {}  # settings every variant shares
    backend: str | UnsetType = UNSET  # unknown for a file written before it was recorded
    order: list[str]
    repeat: int = 1
    complete: bool
    variants: list[Variant] = []

    @classmethod
    def type_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "variants": [_variant(variant, type_metrics) for variant in data["variants"]]}

    @classmethod
    def file_shape(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "variants": [_variant(variant, file_metrics) for variant in data["variants"]]}


def _variant(variant: dict[str, Any], shape: Callable[[Any], Any]) -> dict[str, Any]:
    variant = {**variant, "metrics": shape(variant["metrics"])}
    if "trials" in variant:
        variant["trials"] = [{**trial, "metrics": shape(trial["metrics"])} for trial in variant["trials"]]
    return variant


def _v0_to_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Files written before the type: the oldest have gpu_busy_fraction for gpu_busy_step_spans."""
    variants = []
    for variant in data.get("variants") or []:
        variant = {**variant, "steps": renamed_keys(variant.get("steps"))}
        if "trials" in variant:
            variant["trials"] = [{**t, "steps": renamed_keys(t.get("steps"))} for t in variant["trials"]]
        variants.append(variant)
    return {**data, "variants": variants}


Ablation.MIGRATIONS = {0: _v0_to_v1}
