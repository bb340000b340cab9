"""summary.json: what a run measured, with its config and machine (RunSummary and its parts). The file
is the types' own encoding: field order is key order, and a part some runs lack is UNSET and left out.
Adding a key to the file is adding a field here, in the place its key goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from llmbench.device.machine import Environment
from llmbench.results.json_file import ResultFileError, convert, migrate, read_object, write
from llmbench.results.metrics import Metrics, TurnMetrics, flatten, unflatten
from llmbench.results.steps import Steps

SCHEMA_VERSION = 2
WHAT = "summary"


class Spread(msgspec.Struct):
    """p50, p99 and max in ms of `count` values (backends/loop_monitor.py spread_ms)."""

    p50: float
    p99: float
    max: float
    count: int


class ClientWorker(msgspec.Struct, kw_only=True):
    """One client loop's usage: its event loop's lag, CPU and busy seconds, most requests in flight."""

    loop_lag_ms: Spread | None | UnsetType = UNSET
    cpu_s: float | None | UnsetType = UNSET
    busy_s: float | None | UnsetType = UNSET
    cpu_fraction: float | None | UnsetType = UNSET
    max_in_flight: int | UnsetType = UNSET


class Client(msgspec.Struct, kw_only=True):
    """The benchmark client's own overhead, and whether it limited the run (metrics/client.py)."""

    schedule_lag_ms: Spread | None
    loop_lag_ms: Spread | None
    workers: list[ClientWorker] | None  # None: an in-process backend, no client loop
    max_in_flight: int
    configured_concurrency: int | None
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    lag_bound_ms: float
    client_limited: bool
    reason: str


class ServerMetrics(msgspec.Struct, kw_only=True):
    """The server's /metrics over the timed trials (metrics/server_side.py): counters' increases,
    histograms' means, gauges' mean and peak, and the Prometheus name each was read from."""

    url: str
    available: bool
    reason: str | UnsetType = UNSET  # why no scrape was taken
    scrapes: int | UnsetType = UNSET
    prompt_tokens: float | None | UnsetType = UNSET
    generation_tokens: float | None | UnsetType = UNSET
    requests_finished: float | None | UnsetType = UNSET
    preemptions: float | None | UnsetType = UNSET
    prefix_cache_queries: float | None | UnsetType = UNSET
    prefix_cache_hits: float | None | UnsetType = UNSET
    server_mean_ttft_ms: float | None | UnsetType = UNSET
    server_mean_itl_ms: float | None | UnsetType = UNSET
    server_mean_e2el_ms: float | None | UnsetType = UNSET
    mean_running: float | None | UnsetType = UNSET
    max_running: float | None | UnsetType = UNSET
    mean_waiting: float | None | UnsetType = UNSET
    max_waiting: float | None | UnsetType = UNSET
    mean_kv_cache_usage: float | None | UnsetType = UNSET
    max_kv_cache_usage: float | None | UnsetType = UNSET
    mean_prefix_cache_hit_rate: float | None | UnsetType = UNSET
    max_prefix_cache_hit_rate: float | None | UnsetType = UNSET
    prefix_cache_hit_rate_by_trial: list[float | None] | UnsetType = UNSET
    # speculative decoding, where the server reports it: over the trials, and each trial's
    spec_drafts: float | None | UnsetType = UNSET
    spec_draft_tokens: float | None | UnsetType = UNSET
    spec_accepted_tokens: float | None | UnsetType = UNSET
    spec_acceptance_rate: float | None | UnsetType = UNSET
    spec_mean_accepted_length: float | None | UnsetType = UNSET
    spec_drafts_by_trial: list[float | None] | UnsetType = UNSET
    spec_acceptance_rate_by_trial: list[float | None] | UnsetType = UNSET
    spec_mean_accepted_length_by_trial: list[float | None] | UnsetType = UNSET
    sources: dict[str, str] | UnsetType = UNSET


class ServerProfile(msgspec.Struct, kw_only=True):
    """backend.profile_server: the server's profiler over the timed trials (backends/server_profile.py)."""

    url: str  # the server's root, where /start_profile and /stop_profile were posted
    started: bool
    stopped: bool
    trace: str | None  # the trace's path on the server, where it says (llmbench serve)
    message: str  # what the server answered last, or why it was not profiled


class Sample(msgspec.Struct):
    """A completion of the run, prompt and text shortened (run/samples.py)."""

    request: str
    prompt: str
    completion: str
    prompt_tokens: int
    output_tokens: int


class RunSummary(msgspec.Struct, kw_only=True):
    schema_version: int
    name: str
    complete: bool
    started_at: str | UnsetType = UNSET  # unknown for a run rebuilt from its row files
    config: dict[str, Any]  # the resolved run config, as config.yaml has it
    environment: Environment = msgspec.field(default_factory=Environment)
    metrics: Metrics | None  # None (`{}` in the file): no trial finished
    steps: Steps
    trials: list[Metrics] | UnsetType = UNSET  # each trial's, with --repeat; `metrics` is their median
    server_metrics: ServerMetrics | UnsetType = UNSET
    client: Client | UnsetType = UNSET
    turns: dict[str, TurnMetrics] | UnsetType = UNSET  # by turn index, "1" first
    models: dict[str, Metrics] | UnsetType = UNSET  # by served model, under backend.models
    samples: list[Sample] | UnsetType = UNSET
    served_model: str | UnsetType = UNSET  # the model an HTTP server said it serves
    server_profile: ServerProfile | UnsetType = UNSET  # with backend.profile_server
    warnings: list[str] | UnsetType = UNSET  # what the figures must be read with (a warm prefix cache)
    stop_reason: str | UnsetType = UNSET  # stopped or interrupted before the end

    @classmethod
    def load(cls, path: str | Path) -> RunSummary:
        """A run directory's summary.json, or the file itself; an older file is migrated first."""
        path = Path(path)
        file = path / "summary.json" if path.is_dir() else path
        return cls.from_dict(read_object(file, WHAT), file)

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Path | str = "summary.json") -> RunSummary:
        if not isinstance(data.get("metrics"), dict) or "name" not in data:
            raise ResultFileError(f"{path}: not an llmbench summary (no 'name' and 'metrics')")
        data = migrate(data, Path(path), WHAT, SCHEMA_VERSION, _MIGRATIONS)
        return convert(_unflattened(data), cls, Path(path), WHAT)

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object."""
        data = msgspec.to_builtins(self)
        data["metrics"] = flatten(data["metrics"]) if data["metrics"] is not None else {}
        if "trials" in data:
            data["trials"] = [flatten(trial) for trial in data["trials"]]
        if "turns" in data:
            data["turns"] = {turn: flatten(metrics) for turn, metrics in data["turns"].items()}
        if "models" in data:
            data["models"] = {model: flatten(metrics) for model, metrics in data["models"].items()}
        return data

    def save(self, path: str | Path) -> None:
        """Written atomically: a reader never sees half a file."""
        write(Path(path), self.to_dict())


def _unflattened(data: dict[str, Any]) -> dict[str, Any]:
    data = {**data, "metrics": unflatten(data["metrics"]) if data["metrics"] else None}
    if "trials" in data:
        data["trials"] = [unflatten(trial) for trial in data["trials"]]
    if "turns" in data:
        data["turns"] = {turn: unflatten(metrics) for turn, metrics in data["turns"].items()}
    if "models" in data:
        data["models"] = {model: unflatten(metrics) for model, metrics in data["models"].items()}
    return data


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 files written before the rename have gpu_busy_fraction for gpu_busy_step_spans."""
    steps = dict(data.get("steps") or {"num_steps": 0})
    if "gpu_busy_fraction" in steps:
        steps["gpu_busy_step_spans"] = steps.pop("gpu_busy_fraction")
    return {**data, "steps": steps}


_MIGRATIONS = {1: _v1_to_v2}
