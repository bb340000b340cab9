"""A trial against the server's prefix cache: emptying it first (backend.reset_prefix_cache) and telling
when the trial's prompts found cached tokens that none of its own earlier requests put there, a cache
an earlier run, trial or warm-up warmed, which makes TTFT look better than a cold server gives.

A request's cached tokens (usage.prompt_tokens_details.cached_tokens) are explained by the prompts sent
before it in the same trial (the longest prefix it shares with one of them, counted in whole 16-token
blocks, vLLM's default block size) plus the tokens the server added itself (a chat template's, the
server's prompt count less the planned one); a request past that by a block or more was served from a
cache the trial did not fill."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmbench.backends.cache_reset import root_of
from llmbench.config.schema import RunConfig
from llmbench.results.records import RequestRecord

BLOCK = 16


class PrefixIndex:
    """The prompts a trial has sent so far, as chained hashes of their whole blocks: how much of each
    new prompt an earlier one shares. A set of ints, one a block, not the prompts themselves."""

    def __init__(self) -> None:
        self._blocks: set[int] = set()
        self.shared: dict[str, int] = {}  # request id -> prompt tokens an earlier request shares

    def add(self, request_id: str, prompt_token_ids: Sequence[int]) -> None:
        key, matched, shared = 0, True, 0
        for start in range(0, len(prompt_token_ids) - BLOCK + 1, BLOCK):
            key = hash((key, *prompt_token_ids[start : start + BLOCK]))
            if matched and key in self._blocks:
                shared += BLOCK
            else:
                matched = False
                self._blocks.add(key)
        self.shared[request_id] = shared


def uncaused_hits(records: Sequence[RequestRecord], index: PrefixIndex) -> list[RequestRecord]:
    """The trial's requests whose cached prompt tokens its own earlier requests do not explain."""
    found = []
    for record in records:
        # a later turn's history holds the answers the server generated in this trial, which it caches too
        if record.cached_prompt_tokens is None or record.warmup or (record.turn or 1) > 1:
            continue
        added = record.prompt_len - record.planned_prompt_len if record.planned_prompt_len is not None else 0
        if record.cached_prompt_tokens >= index.shared.get(record.id, 0) + max(0, added) + BLOCK:
            found.append(record)
    return found


@dataclass(frozen=True)
class TrialCache:
    """A trial's prompts against the server's prefix cache (all None where the server reports none)."""

    cached_prompt_tokens: int | None  # summed over the trial's requests
    warm_cache_requests: int | None  # those whose hits the trial's own prompts do not explain
    warning: str | None  # what the figures must be read with, when there are such requests


def trial_cache(trial: int, records: Sequence[RequestRecord], index: PrefixIndex | None) -> TrialCache:
    """Trial `trial`'s (0-based) cache figures from its rows and the prompts its phase indexed."""
    cached = [r.cached_prompt_tokens for r in records if r.cached_prompt_tokens is not None]
    if not cached or index is None:
        return TrialCache(None, None, None)
    hits = uncaused_hits(records, index)
    warning = None
    if hits:
        tokens = sum(r.cached_prompt_tokens for r in hits)
        warning = (
            f"trial {trial + 1}: {len(hits)} of {len(records)} requests found {tokens:,} prompt tokens in "
            "the server's prefix cache that no earlier request of the trial put there (an earlier run, trial "
            "or warm-up warmed it, so TTFT is better than a cold server's); set backend.reset_prefix_cache: "
            "true"
        )
    return TrialCache(sum(cached), len(hits), warning)


def reset_url(config: RunConfig, backend: object) -> str | None:
    """The root of the server whose prefix cache backend.reset_prefix_cache empties (None: not set)."""
    if not config.backend.reset_prefix_cache:
        return None
    return root_of(config, backend)
