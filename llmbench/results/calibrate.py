"""calibrate.json: `llmbench calibrate`'s error of the client at the config's load, and its ladder of
streams against the capacity mock (llmbench/studies/calibrate.py writes it). Field order is the file's
key order; the parts a calibration cut short never reached are left out."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from llmbench.results.json_file import StudyFile
from llmbench.results.summary import Client, Spread


class CalibrateOptions(msgspec.Struct, frozen=True):
    ttft_ms: float = 50.0  # the fidelity mock's
    itl_ms: float = 10.0
    max_streams: int = 512  # the capacity ladder's top


class Fidelity(msgspec.Struct, kw_only=True):
    """The client's median TTFT and mean ITL (per token) against the mock's, in ms, over the timed
    requests that completed; None where no request gave one."""

    requests: int
    median_ttft_error_ms: float | None
    mean_itl_error_ms: float | None
    client_median_ttft_ms: float | None
    mock_median_ttft_ms: float | None
    client_mean_itl_ms: float | None
    mock_mean_itl_ms: float | None
    client: Client | None  # the run's summary.json client block


class Level(msgspec.Struct, kw_only=True):
    """One rung of the ladder: chunks a second taken in and sent, and whether the client limited it."""

    streams: int
    workers: int
    chunks_per_s: float | None
    mock_chunks_per_s: float | None
    schedule_lag_ms: Spread | None
    client_limited: bool
    reason: str


class Calibrate(StudyFile, kw_only=True):
    FILE = "calibrate.json"
    WHAT = "calibrate"

    command: str
    options: CalibrateOptions
    workers: int | str  # the config's backend.workers: a count or "auto"
    lag_bound_ms: float
    complete: bool
    runs: list[str] | UnsetType = UNSET  # run directories, in the order they ran
    fidelity: Fidelity | UnsetType = UNSET
    capacity: list[Level] | UnsetType = UNSET
    sustained: Level | None | UnsetType = UNSET  # the highest rung not client-limited
    load_average_1m: float | UnsetType = UNSET  # the host's, when the ladder ended
    host_capacity_file: str | UnsetType = UNSET  # where the one-worker figure was kept for `auto`
    stop_reason: str | UnsetType = UNSET  # interrupted, and during which run


# files written before the type are the first version's shape
Calibrate.MIGRATIONS = {0: dict}
