"""The request metrics of a run, a trial or a turn, under vLLM's key names (summary.json's `metrics`,
each of its `trials` and `turns`, and the metrics of a study's runs).

The percentiles are the config's (`output.percentiles`, any numbers in (0, 100]), so their keys cannot
be fields: they are kept in `percentiles` and written back flat, after each latency's max, where the
file has always had them."""

from __future__ import annotations

import re
from typing import Any

import msgspec

# a reasoning model's run adds the last three (metrics/reasoning.py)
LATENCIES = ("ttft", "tpot", "itl", "e2el", "ttfo", "reasoning_itl", "answer_itl")
STATS = ("mean", "median", "std", "min", "max")
PERCENTILE_PATTERN = rf"^p[0-9.e+-]+_({'|'.join(LATENCIES)})_ms$"
_PERCENTILE_KEY = re.compile(PERCENTILE_PATTERN)
_LATENCY_KEY = re.compile(rf"^({'|'.join(STATS)})_({'|'.join(LATENCIES)})_ms$")


class Latencies(msgspec.Struct, kw_only=True):
    """mean/median/std/min/max of each latency in ms; None where no request contributed, and the
    reasoning figures UNSET (left out) where no request streamed reasoning."""

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
    # a reasoning model's run: time to the answer's first token, and the gaps within each phase
    mean_ttfo_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    median_ttfo_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    std_ttfo_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    min_ttfo_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    max_ttfo_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    mean_reasoning_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    median_reasoning_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    std_reasoning_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    min_reasoning_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    max_reasoning_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    mean_answer_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    median_answer_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    std_answer_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    min_answer_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    max_answer_itl_ms: float | None | msgspec.UnsetType = msgspec.UNSET
    # p<P>_<latency>_ms for each configured percentile, e.g. "p99_ttft_ms"
    percentiles: dict[str, float | None] = {}

    def value(self, key: str) -> Any:
        """A figure by its key in the file (a user's `--metric` names one): None when absent."""
        if _PERCENTILE_KEY.match(key):
            return self.percentiles.get(key)
        value = getattr(self, key, None) if key in self.__struct_fields__ else None
        return None if value is msgspec.UNSET else value


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
    # a reasoning model's run (metrics/reasoning.py): the output tokens that were reasoning and answer,
    # and the completed requests that ended before their answer began (they have no TTFO)
    total_reasoning_tokens: int | msgspec.UnsetType = msgspec.UNSET
    total_answer_tokens: int | msgspec.UnsetType = msgspec.UNSET
    requests_without_answer: int | msgspec.UnsetType = msgspec.UNSET

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
        elif _LATENCY_KEY.match(key):
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
            flat.update((k, v) for k, v in value.items() if _latency(k) == name)
            flat.update((k, v) for k, v in percentiles.items() if _latency(k) == name)
    return flat


def _latency(key: str) -> str:
    """The latency a `<stat>_<latency>_ms` or `p<P>_<latency>_ms` key holds."""
    return key.split("_", 1)[1].removesuffix("_ms")


def file_metrics(data: dict[str, Any] | None) -> dict[str, Any]:
    """A Metrics' builtins as a file has them: flat, and `{}` where no trial finished (None)."""
    return flatten(data) if data is not None else {}


def type_metrics(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The inverse of file_metrics: None for `{}` or a missing object."""
    return unflatten(data) if data else None
