"""backend.workers `auto`: how many stream workers a run's streams need on this host, from what one worker
sustained here.

`llmbench calibrate` climbs its ladder with one worker (streams against a mock that sends a chunk every
millisecond) and keeps the chunks per second of the highest rung that was not client-limited in a file
per host and llmbench version, under $LLMBENCH_CACHE (default ~/.cache/llmbench)/client-capacity. `auto`
sizes the workers for that load, a chunk a millisecond a stream: a server's decode rarely streams
faster, so the workers keep up with any. Without the file it takes DEFAULT_CHUNKS_PER_S and says so."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import llmbench
from llmbench.config.schema import WorkloadConfig

# one worker's figure without a calibration: below what one took in on the 2-core CI host under load
# (115k) and on the 16-core GPU host (180-190k) (docs/guides/client-fidelity.md), so it errs towards more
# workers
DEFAULT_CHUNKS_PER_S = 100_000.0
STREAM_CHUNKS_PER_S = 1000.0  # the load auto sizes for: calibrate's ladder, a chunk a millisecond a stream


@dataclass(frozen=True)
class HostCapacity:
    """What one stream worker sustained on this host: calibrate's highest rung within the lag bound."""

    chunks_per_s: float
    streams: int
    lag_bound_ms: float
    measured: str  # the date calibrate ran, YYYY-MM-DD
    host: str = field(default_factory=platform.node)
    version: str = llmbench.__version__  # a new version's client may sustain more or less


@dataclass(frozen=True)
class WorkerChoice:
    count: int
    reason: str  # why, for the run's log line


def capacity_path() -> Path:
    cache = Path(os.environ.get("LLMBENCH_CACHE", Path.home() / ".cache" / "llmbench"))
    return cache / "client-capacity" / f"{platform.node() or 'host'}-{llmbench.__version__}.json"


def load_capacity() -> HostCapacity | None:
    """This host's figure for this version, or None where calibrate has not run (or its file is unusable)."""
    try:
        return HostCapacity(**json.loads(capacity_path().read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def save_capacity(capacity: HostCapacity) -> Path:
    path = capacity_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(capacity), indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)  # a run reading it meanwhile sees the old file or the new, never half of one
    return path


def choose_workers(setting: int | str, workload: WorkloadConfig, cores: int | None = None) -> WorkerChoice:
    """backend.workers as a number, and why. `auto`: enough workers that each takes in at most what one
    sustained on this host, for the configured concurrency (workload.max_concurrency, else its number of
    requests) at a chunk a millisecond a stream; at most the usable cores less one (the runner's own), at
    least one (which streams from a thread of the runner's process). Never more workers than streams:
    each keeps a share of max_concurrency (openai_worker_set.slot_shares). `cores`: where the workers
    run when that is not this host (a Ray cluster's CPUs)."""
    limit = workload.max_concurrency
    if setting != "auto":
        if limit is not None and setting > limit:  # each worker keeps a share of the limit: at least one
            return WorkerChoice(
                limit,
                f"{limit} stream worker{'s' * (limit > 1)} (backend.workers: "
                f"{setting}, at most one a slot of workload.max_concurrency {limit})",
            )
        return WorkerChoice(
            setting, f"{setting} stream worker{'s' * (setting > 1)} (backend.workers: {setting})"
        )
    streams = limit or workload.num_requests
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    capacity = load_capacity()
    per_worker = capacity.chunks_per_s if capacity else DEFAULT_CHUNKS_PER_S
    needed = math.ceil(streams * STREAM_CHUNKS_PER_S / per_worker)
    count = max(1, min(cores - 1, needed, streams))
    rate = f"{per_worker / 1000:,.0f}k chunks/s per worker"
    if capacity:
        basis = f"this host sustained {rate}, calibrate {capacity.measured}"
    else:
        basis = f"no calibration of this host: {rate} assumed; llmbench calibrate measures it"
    capped = f"; {needed} wanted, {cores} cores" if count < needed else ""
    workers = f"{count} stream worker{'s' * (count > 1)}"
    return WorkerChoice(count, f"{workers} for {streams:,} streams ({basis}{capped})")
