"""Request generation: prompt tokens, output lengths and arrival times, all from one seed.

Each random quantity draws from its own stream (seeded by (seed, purpose)), so changing one knob,
say the output distribution, leaves the prompts and arrivals of the same seed untouched; warm-up
requests have streams of their own, so their number never changes the timed workload."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import ArrivalConfig, LengthConfig, RunConfig
from llmbench.run.ramp import offered_rates, ramped_times

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# stream ids: one random generator per purpose
_INPUT, _OUTPUT, _TOKENS, _ARRIVAL, _PREFIX, _DATASET = range(6)


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
        token_rng = _rng(wl.seed, phase, _TOKENS)
        prompts = [synthetic_tokens(k, info, token_rng) for k in input_lens]
    else:
        prompts = [ids for ids, _, _ in dataset[:n]]
    if prefixes:
        prompts = [prefixes[i % len(prefixes)] + p for i, p in enumerate(prompts)]
    texts = [text for _, _, text in dataset[:n]] if dataset is not None else [None] * n
    return [WorkloadRequest(f"{id_prefix}{i}", 0.0, prompts[i], output_lens[i], texts[i]) for i in range(n)]


def shared_prefixes(config: RunConfig, info: ModelInfo) -> list[list[int]]:
    """workload.prefix's groups: prefix_len tokens each, drawn once per seed."""
    prefix = config.workload.prefix
    _check_lengths([prefix.prefix_len], info)
    rng = _rng(config.workload.seed, 0, _PREFIX)
    return [synthetic_tokens(prefix.prefix_len, info, rng) for _ in range(prefix.groups)]


def _check_fits(requests: list[WorkloadRequest], info: ModelInfo) -> None:
    _check_lengths([len(r.prompt_token_ids) + r.output_len for r in requests], info)


def _check_lengths(totals: list[int], info: ModelInfo) -> None:
    """Each request's prompt plus output tokens must fit the model's context."""
    too_long = [n for n in totals if n > info.max_model_len]
    if too_long:
        raise WorkloadError(
            f"workload: {len(too_long)} requests need more than max_model_len={info.max_model_len} tokens "
            f"(up to {max(too_long)}); lower the input/output lengths or raise engine.max_model_len"
        )


def _load_sharegpt(config: RunConfig, info: ModelInfo) -> list[tuple[list[int], int, str]]:
    """(prompt token ids, output length, prompt text) per usable conversation, in a seeded random order."""
    tokenizer = load_tokenizer(config)
    entries = read_dataset_json(config)
    pairs = []
    for entry in entries if isinstance(entries, list) else []:
        if not _is_conversation(entry):
            continue
        turns = entry["conversations"]
        prompt = tokenizer.encode(turns[0]["value"]).ids
        output_len = len(tokenizer.encode(turns[1]["value"], add_special_tokens=False).ids)
        if prompt and output_len and len(prompt) + output_len <= info.max_model_len:
            pairs.append((prompt, output_len, turns[0]["value"]))
    bad = [t for ids, _, _ in pairs for t in ids if t >= info.vocab_size]
    if bad:
        raise WorkloadError(
            f"workload.dataset.tokenizer: token id {max(bad)} is outside the model's vocabulary "
            f"({info.vocab_size}); use the model's own tokenizer"
        )
    order = _rng(config.workload.seed, 0, _DATASET).permutation(len(pairs))
    return [pairs[i] for i in order]


def _is_conversation(entry: object) -> bool:
    """A human turn answered by a gpt turn, both with text; anything else in the file is skipped."""
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
        return False
    return (
        turns[0].get("from") == "human"
        and turns[1].get("from") == "gpt"
        and all(isinstance(t.get("value"), str) for t in turns[:2])
    )


def load_tokenizer(config: RunConfig) -> Tokenizer:
    """The dataset's tokenizer (workload.dataset.tokenizer, model.tokenizer or the model's own)."""
    from tokenizers import Tokenizer

    tokenizer_path = _tokenizer_path(config)
    try:
        return Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # the tokenizers library raises plain Exceptions for unreadable files
        message = " ".join(str(e).split())[:200]
        raise WorkloadError(f"workload.dataset.tokenizer: cannot load {tokenizer_path}: {message}") from None


def read_dataset_json(config: RunConfig) -> object:
    """workload.dataset.path's JSON, whatever its shape; what cannot be read is a WorkloadError."""
    path = Path(config.workload.dataset.path).expanduser()
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise WorkloadError(f"workload.dataset.path: cannot read {path} ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise WorkloadError(f"workload.dataset.path: {path} is not UTF-8 text (offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise WorkloadError(f"workload.dataset.path: {path} is not JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise WorkloadError(f"workload.dataset.path: {path} is nested too deeply to parse") from None


def _tokenizer_path(config: RunConfig) -> str:
    candidates = [config.workload.dataset.tokenizer, config.model.tokenizer]
    if config.model.path:
        candidates.append(str(Path(config.model.path) / "tokenizer.json"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise WorkloadError(
        "workload.dataset.tokenizer: no tokenizer.json found; set it or model.tokenizer / model.path"
    )
