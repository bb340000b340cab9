"""The request metrics of a run, a trial or a turn, under vLLM's key names (summary.json's `metrics`,
each of its `trials` and `turns`, and the metrics of a study's runs).

The percentiles are the config's (`output.percentiles`, any numbers in (0, 100]), so their keys cannot
be fields: they are kept in `percentiles` and written back flat, after each latency's max, where the
file has always had them."""

from __future__ import annotations

import re
from typing import Any

import msgspec

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "std", "min", "max")
PERCENTILE_PATTERN = r"^p[0-9.e+-]+_(ttft|tpot|itl|e2el)_ms$"
_PERCENTILE_KEY = re.compile(PERCENTILE_PATTERN)


class Latencies(msgspec.Struct, kw_only=True):
    """mean/median/std/min/max of each latency in ms; None where no request contributed."""

    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    std_ttft_ms: float | None = None
    min_ttft_ms: float | None = None
    max_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    std_tpot_ms: float | None = None
    min_tpot_ms: float | None = None
    max_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    std_itl_ms: float | None = None
    min_itl_ms: float | None = None
    max_itl_ms: float | None = None
    mean_e2el_ms: float | None = None
    median_e2el_ms: float | None = None
    std_e2el_ms: float | None = None
    min_e2el_ms: float | None = None
    max_e2el_ms: float | None = None
    # p<P>_<latency>_ms for each configured percentile, e.g. "p99_ttft_ms"
    percentiles: dict[str, float | None] = {}

    def value(self, key: str) -> Any:
        """A figure by its key in the file (a user's `--metric` names one): None when absent."""
        if _PERCENTILE_KEY.match(key):
            return self.percentiles.get(key)
        return getattr(self, key, None) if key in self.__struct_fields__ else None


class Metrics(msgspec.Struct, kw_only=True):
    """One trial's metrics, or the per-metric median over the trials (compute_metrics' definitions)."""

    completed: int
    failed: int
    timed_out: int | msgspec.UnsetType = msgspec.UNSET  # of the failed: past backend.request_timeout_s
    cancelled: int | msgspec.UnsetType = msgspec.UNSET  # hung up on by workload.cancel, not failed
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    request_goodput: float | None
    latencies: Latencies
    # requests without a token when the run was cut short (written from the runner's phase state)
    not_started: int | msgspec.UnsetType = msgspec.UNSET
    # prompt tokens the server said it served from its prefix cache, and the requests that hit a prefix
    # an earlier trial had left there (run/prefix_cache.py); None where the server does not say
    cached_prompt_tokens: int | None | msgspec.UnsetType = msgspec.UNSET
    warm_cache_requests: int | None | msgspec.UnsetType = msgspec.UNSET

    def value(self, key: str) -> Any:
        if key in self.__struct_fields__ and key != "latencies":
            value = getattr(self, key)
            return None if value is msgspec.UNSET else value
        return self.latencies.value(key)


class TurnMetrics(msgspec.Struct, kw_only=True):
    """One turn index of multi-turn sessions (summary.json's `turns`)."""

    completed: int
    failed: int
    mean_prompt_len: float
    latencies: Latencies


def unflatten(data: dict[str, Any]) -> dict[str, Any]:
    """A metrics object as the file has it, made the shape of Metrics or TurnMetrics: the latency keys
    move into `latencies`, the percentile keys into its `percentiles`."""
    latencies: dict[str, Any] = {"percentiles": {}}
    rest = {}
    for key, value in data.items():
        if _PERCENTILE_KEY.match(key):
            latencies["percentiles"][key] = value
        elif key.endswith("_ms") and key.split("_")[0] in STATS and key.split("_")[1] in LATENCIES:
            latencies[key] = value
        else:
            rest[key] = value
    return {**rest, "latencies": latencies}


def flatten(data: dict[str, Any]) -> dict[str, Any]:
    """The inverse of unflatten, in the file's order: each latency's statistics, then its percentiles,
    where `latencies` stood."""
    flat = {}
    for key, value in data.items():
        if key != "latencies":
            flat[key] = value
            continue
        percentiles = value.pop("percentiles", {})
        for name in LATENCIES:
            flat.update((k, v) for k, v in value.items() if k.split("_")[1] == name)
            flat.update((k, v) for k, v in percentiles.items() if k.split("_")[1] == name)
    return flat


def file_metrics(data: dict[str, Any] | None) -> dict[str, Any]:
    """A Metrics' builtins as a file has them: flat, and `{}` where no trial finished (None)."""
    return flatten(data) if data is not None else {}


def type_metrics(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The inverse of file_metrics: None for `{}` or a missing object."""
    return unflatten(data) if data else None
