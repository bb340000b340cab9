"""A workload replayed from a trace (workload.dataset.type mooncake or burstgpt): each row's lengths at
its own time, divided by workload.dataset.speed, the first timed row at 0.

Prompt tokens are synthetic, drawn from the vocabulary. A Mooncake hash id always stands for the same
512 tokens within a trial (seeded by the workload seed and the id), so rows that share ids share those
blocks of prompt, in order, and a prefix cache finds them; the prompt's tokens past its blocks are its
own. Warm-up requests take the lengths of the rows after the timed ones but none of the shared
blocks, so they do not fill the prefix cache for the timed ones."""

from __future__ import annotations

import logging

import numpy as np

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import RunConfig
from llmbench.run.traces import MOONCAKE_BLOCK_TOKENS, TraceError, TraceRow, read_trace
from llmbench.run.workload import Requests, WorkloadError, WorkloadRequest, synthetic_tokens

logger = logging.getLogger(__name__)

# stream ids of their own, apart from workload.py's
_BLOCKS, _OWN_TOKENS, _WARMUP_TOKENS = 16, 17, 18


def trace_workload(config: RunConfig, info: ModelInfo) -> tuple[Requests, Requests]:
    """The warm-up and timed requests of the trace."""
    wl = config.workload
    rows = _usable_rows(config, info, wl.num_requests + wl.warmup_requests)
    timed, rest = rows[: wl.num_requests], rows[wl.num_requests :]
    blocks = BlockTokens(wl.seed, info)
    start = timed[0].time_s
    requests = [
        WorkloadRequest(
            str(i),
            (row.time_s - start) / wl.dataset.speed,
            blocks.prompt(row, np.random.default_rng([wl.seed, _OWN_TOKENS, i])),
            row.output_length,
        )
        for i, row in enumerate(timed)
    ]
    _check_span(requests, config)
    rng = np.random.default_rng([wl.seed, _WARMUP_TOKENS])
    warmup = [
        WorkloadRequest(f"warmup-{i}", 0.0, synthetic_tokens(row.input_length, info, rng), row.output_length)
        for i, row in enumerate(rest)
    ]
    return warmup, requests


def _check_span(requests: Requests, config: RunConfig) -> None:
    """Say how long the replay takes before it starts, and refuse one past workload.dataset.max_span_s:
    a wait of days would otherwise begin without a word."""
    dataset = config.workload.dataset
    span = requests[-1].arrival_time
    replay = f"{len(requests)} requests over {_duration(span)} at speed {dataset.speed:g}"
    if span > dataset.max_span_s:
        raise WorkloadError(
            f"workload.dataset.max_span_s: the trace's {replay}, more than {_duration(dataset.max_span_s)}; "
            "raise max_span_s to replay it, or workload.dataset.speed to replay it faster"
        )
    logger.info("trace: replaying %s", replay)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


class BlockTokens:
    """The tokens of each Mooncake hash id, drawn once per id."""

    def __init__(self, seed: int, info: ModelInfo):
        self.seed, self.info = seed, info
        self._blocks: dict[int, list[int]] = {}

    def block(self, hash_id: int) -> list[int]:
        if hash_id not in self._blocks:
            rng = np.random.default_rng([self.seed, _BLOCKS, hash_id])
            self._blocks[hash_id] = synthetic_tokens(MOONCAKE_BLOCK_TOKENS, self.info, rng)
        return self._blocks[hash_id]

    def prompt(self, row: TraceRow, own: np.random.Generator) -> list[int]:
        """The row's input_length tokens: its blocks in order, then tokens of its own."""
        tokens: list[int] = []
        for hash_id in row.hash_ids:
            if len(tokens) >= row.input_length:
                break
            tokens += self.block(hash_id)
        del tokens[row.input_length :]
        return tokens + synthetic_tokens(row.input_length - len(tokens), self.info, own)


def _usable_rows(config: RunConfig, info: ModelInfo, need: int) -> list[TraceRow]:
    """The first `need` rows whose prompt and output fit the model; longer ones are skipped."""
    dataset = config.workload.dataset
    rows: list[TraceRow] = []
    skipped = 0
    try:
        for row in read_trace(dataset.type, dataset.path):
            if row.input_length + row.output_length > info.max_model_len:
                skipped += 1
                continue
            rows.append(row)
            if len(rows) == need:
                break
    except TraceError as e:
        raise WorkloadError(f"workload.dataset.path: {e}") from None
    if skipped:
        logger.info("trace: skipped %d rows longer than max_model_len=%d", skipped, info.max_model_len)
    if len(rows) < need:
        raise WorkloadError(
            f"workload.dataset.path: {len(rows)} usable rows in the trace ({skipped} longer than "
            f"max_model_len={info.max_model_len}), need {need} (num_requests + warmup_requests)"
        )
    return rows
