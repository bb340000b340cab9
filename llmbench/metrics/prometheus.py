"""A server's Prometheus text (GET /metrics) read into the few quantities a benchmark sets beside the
client's view, under one name whichever server it came from: vLLM's, SGLang's, or ours (which uses
vLLM's names).

A quantity is summed over the label sets of its metric (one model, several finish reasons), except the
KV cache usage, a fraction, which is averaged. Histograms keep their _sum and _count, whose deltas over
a run give the server's own mean latency."""

from __future__ import annotations

import math
import re

GAUGES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),  # SGLang's own fraction; vLLM's is two counters
}
COUNTERS = {
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "requests_finished": ("vllm:request_success_total", "sglang:num_requests_total"),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_reqs_total"),
    # prompt tokens looked up in the prefix cache, and those found (vLLM V1; its first versions said gpu_)
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
    "e2el": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
}
# speculative decoding, apart from the rest: a server without it has none of these, and its summary
# none of their keys (metrics/server_side.py). vLLM counts each request's draft of a step, its proposed
# tokens and those accepted (prometheus_client adds _total to a counter's name; either spelling is
# read); SGLang counts each request's verify passes, its draft, and keeps the acceptance of its last
# logging interval in two gauges
SPEC_COUNTERS = {
    "spec_drafts": (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_drafts",
        "sglang:spec_verify_calls_total",
    ),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens"),
    "spec_accepted_tokens": (
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens",
    ),
}
SPEC_GAUGES = {
    "spec_accept_rate": ("sglang:spec_accept_rate",),
    "spec_accept_length": ("sglang:spec_accept_length",),
}
AVERAGED = {"kv_cache_usage", "prefix_cache_hit_rate", *SPEC_GAUGES}

# name, optional {labels}, value, optional timestamp
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\S+)?\s*$")


class ExpositionError(ValueError):
    """Text that is not Prometheus's exposition format."""


def parse_samples(text: str) -> dict[str, list[float]]:
    """Every sample's value, by metric name (a histogram's _sum, _count and _bucket are names of their
    own), one value per label set. Comments and blank lines are skipped."""
    samples: dict[str, list[float]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ExpositionError(f"line {number}: not a metric sample: {line[:80]!r}")
        try:
            value = float(match.group(3))
        except ValueError:
            raise ExpositionError(f"line {number}: {match.group(3)[:40]!r} is not a number") from None
        samples.setdefault(match.group(1), []).append(value)
    return samples


def known_quantities(samples: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, str]]:
    """(value of each quantity the server reports, the metric name each came from). Histograms give
    `<name>_sum` and `<name>_count`; a quantity the server lacks is left out."""
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for quantity, names in {**GAUGES, **COUNTERS, **SPEC_GAUGES, **SPEC_COUNTERS}.items():
        name = next((n for n in names if n in samples), None)
        if name is not None:
            found = [v for v in samples[name] if not math.isnan(v)]
            total = sum(found)
            values[quantity] = total / len(found) if quantity in AVERAGED and found else total
            sources[quantity] = name
    for quantity, names in HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_count" in samples), None)
        if name is not None:
            values[f"{quantity}_sum"] = sum(samples.get(f"{name}_sum", []))
            values[f"{quantity}_count"] = sum(samples[f"{name}_count"])
            sources[quantity] = name
    return values, sources
