"""A reasoning model's figures: its output streams reasoning first (a chat delta's reasoning_content or
reasoning), then the answer. TTFT stays the first token of either kind (vLLM's); TTFO is the answer's
first token - submit (AIPerf's time_to_first_output_token, GuideLLM's time_to_first_output_token_ms),
and the arrival gaps split in two: those between the reasoning's arrivals and those between the
answer's (each counted as ITL counts them); the gap from the last reasoning arrival to the first
answer arrival is in neither. A request without reasoning answers from its first token: its TTFO is
its TTFT, and all its gaps are the answer's.

Only a run that saw reasoning has these figures: compute_metrics adds none to a run without it, so the
summary of every other run is what it was."""

from __future__ import annotations

from collections.abc import Sequence

from llmbench.results.records import RequestRecord

REASONING_LATENCIES = ("ttfo", "reasoning_itl", "answer_itl")


def has_reasoning(records: Sequence[RequestRecord]) -> bool:
    return any(r.reasoning_tokens is not None for r in records)


def reasoning_samples(done: Sequence[RequestRecord], gaps) -> dict[str, list[float]]:
    """Seconds: TTFO per succeeded request with an answer token, and the reasoning's and the answer's
    arrival gaps pooled; `gaps` is requests.arrival_gaps."""
    samples: dict[str, list[float]] = {name: [] for name in REASONING_LATENCIES}
    for record in done:
        start = answer_start(record)
        times, same_read = record.token_times, record.same_read_events or ()
        split = len(times) if start is None else start
        samples["reasoning_itl"] += gaps(times[:split], [i for i in same_read if i < split])
        if start is None:
            continue
        samples["ttfo"].append(times[start] - record.submit_time)
        samples["answer_itl"] += gaps(times[start:], [i - start for i in same_read if i > start])
    return samples


def answer_start(record: RequestRecord) -> int | None:
    """The token_times index of the answer's first token: 0 without reasoning, None with no answer."""
    return record.answer_start if record.reasoning_tokens is not None else 0


def reasoning_counts(done: Sequence[RequestRecord]) -> dict[str, int]:
    """Output tokens split into reasoning and answer, and the requests that ended before answering."""
    reasoning = sum(r.reasoning_tokens or 0 for r in done)
    return {
        "total_reasoning_tokens": reasoning,
        "total_answer_tokens": sum(max(0, r.output_len - (r.reasoning_tokens or 0)) for r in done),
        "requests_without_answer": sum(answer_start(r) is None for r in done),
    }
