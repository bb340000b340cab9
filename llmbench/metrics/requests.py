"""Benchmark metrics with vLLM's definitions and key names (benchmark_serving).

TTFT = first token - submit; E2EL = last token - submit; TPOT = (E2EL - TTFT) / (output_len - 1) per
request, 1-token requests excluded; ITL = every gap between consecutive token arrivals pooled over
requests, where an arrival is one SSE event: a chunk of k tokens (same arrival time) is one arrival, and
events that came in one read are one each, at the read's time (gaps of 0, as vLLM's benchmark stamps
each event as it parses it). Throughputs divide by the duration:
first submit to the end of the last timed request, failed ones included (vLLM times the whole run until
every request has returned). Warm-up requests are left out of all of it, failed ones of everything else."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from llmbench.config.schema import SloConfig
from llmbench.metrics.reasoning import has_reasoning, reasoning_counts, reasoning_samples
from llmbench.results.metrics import PERCENTILE_PATTERN, Latencies, Metrics, file_metrics, type_metrics
from llmbench.results.records import CANCELLED, RequestRecord


def compute_metrics(
    records: Sequence[RequestRecord], percentiles: Sequence[float], slo: SloConfig | None = None
) -> Metrics:
    """One trial's metrics. A latency no request contributes to is None, not 0."""
    timed = [r for r in records if not r.warmup]
    done = [r for r in timed if r.succeeded]
    samples = latency_samples(timed)
    duration = max(map(_end_time, timed)) - min(r.submit_time for r in timed) if timed else 0.0
    input_tokens = sum(r.prompt_len for r in done)
    output_tokens = sum(r.output_len for r in done)

    cancelled = sum(r.finish_reason == CANCELLED for r in timed)  # the client hung up: no failure
    stats: dict[str, float | None] = {}
    for name in samples:  # the reasoning latencies only where a request streamed reasoning
        stats.update(latency_stats(name, [s * 1000 for s in samples[name]], percentiles))
    return Metrics(
        completed=len(done),
        failed=len(timed) - len(done) - cancelled,
        timed_out=sum(r.finish_reason == "timeout" for r in timed),  # of the failed
        cancelled=cancelled,
        duration_s=duration,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        request_throughput=_rate(len(done), duration),
        output_throughput=_rate(output_tokens, duration),
        total_token_throughput=_rate(input_tokens + output_tokens, duration),
        request_goodput=_rate(_good_count(done, slo), duration) if slo and slo.any else None,
        latencies=latencies(stats),
        **(reasoning_counts(done) if has_reasoning(timed) else {}),
    )


def latencies(stats: dict[str, float | None]) -> Latencies:
    """latency_stats' figures as Latencies: the percentiles, whose keys the config sets, apart."""
    percentiles = {key: value for key, value in stats.items() if _PERCENTILE.match(key)}
    return Latencies(
        **{key: value for key, value in stats.items() if key not in percentiles}, percentiles=percentiles
    )


def _end_time(record: RequestRecord) -> float:
    """When the request ended; rows written before finish_time existed end at their last token."""
    if record.finish_time is not None:
        return record.finish_time
    return record.token_times[-1] if record.token_times else record.submit_time


def latency_samples(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Seconds per measured, succeeded request for ttft, tpot and e2el; per arrival gap for itl
    (the samples behind the statistics, e.g. for CDF plots); where a measured request streamed
    reasoning, ttfo, reasoning_itl and answer_itl too (metrics/reasoning.py)."""
    timed = [r for r in records if not r.warmup]
    done = [r for r in timed if r.succeeded]
    per_request = [_request_latencies(r) for r in done]
    samples = {
        "ttft": [ttft for ttft, _, _ in per_request],
        "tpot": [tpot for _, tpot, _ in per_request if tpot is not None],
        "itl": [gap for r in done for gap in arrival_gaps(r.token_times, r.same_read_events)],
        "e2el": [e2el for _, _, e2el in per_request],
    }
    if has_reasoning(timed):
        samples.update(reasoning_samples(done, arrival_gaps))
    return samples


def _request_latencies(record: RequestRecord) -> tuple[float, float | None, float]:
    """(TTFT, TPOT, E2EL) of one succeeded request in seconds; TPOT is None for a single token."""
    ttft = record.first_token_time - record.submit_time
    e2el = record.token_times[-1] - record.submit_time
    tpot = (e2el - ttft) / (record.output_len - 1) if record.output_len > 1 else None
    return ttft, tpot, e2el


def arrival_gaps(token_times: Sequence[float], same_read_events: Sequence[int] | None = None) -> list[float]:
    """Gaps between consecutive arrivals; the tokens of one chunk share a time and count once. Events
    that came in one read share its time too, yet each is an arrival (`same_read_events`: the indices
    where the later ones begin), so each adds a gap of 0 after the first."""
    starts = set(same_read_events or ())
    arrivals = [t for i, t in enumerate(token_times) if i == 0 or t != token_times[i - 1] or i in starts]
    return [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]


def latency_stats(
    name: str, values_ms: Sequence[float], percentiles: Sequence[float]
) -> dict[str, float | None]:
    """mean/median/std/min/max and p<P> of one latency, under vLLM's `<stat>_<name>_ms` keys."""
    keys = ["mean", "median", "std", "min", "max"] + [f"p{p:g}" for p in percentiles]
    if not values_ms:
        return {f"{k}_{name}_ms": None for k in keys}
    v = np.asarray(values_ms, dtype=float)
    stats = [v.mean(), np.median(v), v.std(), v.min(), v.max()] + [np.percentile(v, p) for p in percentiles]
    return {f"{k}_{name}_ms": float(s) for k, s in zip(keys, stats, strict=True)}


def median_metrics(trials: Sequence[Metrics]) -> Metrics:
    """Each figure's median over repeated trials (median_over_trials on the file's keys, where each
    configured percentile is a figure of its own)."""
    flat = median_over_trials([file_metrics(msgspec.to_builtins(trial)) for trial in trials])
    return msgspec.convert(type_metrics(flat), Metrics)


def median_over_trials(trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-metric median over repeated trials (None where no trial has a value); a value that is not a
    number (a step summary's peaks_source) is the first trial's that has it. A key only some trials
    have (reasoning seen in one) is kept."""
    merged = {}
    for key in dict.fromkeys(key for trial in trials for key in trial):
        values = [t[key] for t in trials if t.get(key) is not None]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            merged[key] = next(t[key] for t in trials if key in t)
            continue
        merged[key] = float(np.median(values)) if values else None
        if values and all(isinstance(v, int) for v in values):
            merged[key] = int(round(merged[key]))
    return merged


_PERCENTILE = re.compile(PERCENTILE_PATTERN)


def _rate(count: float, duration: float) -> float:
    return count / duration if duration > 0 else 0.0


def _good_count(done: Sequence[RequestRecord], slo: SloConfig) -> int:
    def meets(r: RequestRecord) -> bool:
        ttft, tpot, e2el = _request_latencies(r)
        return all(
            limit is None or value is None or value * 1000 <= limit
            for value, limit in ((ttft, slo.ttft_ms), (tpot, slo.tpot_ms), (e2el, slo.e2el_ms))
        )

    return sum(1 for r in done if meets(r))
