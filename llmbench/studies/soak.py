"""Preemption soak: many requests through the engine with a KV pool far too small for them, then the
same requests with a pool large enough that nothing is preempted. Passing means every request finished
exactly once with the tokens it streamed, the greedy outputs of both runs are identical, and both
engines end empty (no request left, every block free, every ref count zero). In the small pool the
block invariants are checked after every step and each forward's KV slots before it runs."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.table import Table

from llmbench.config.load import parse_config
from llmbench.engine.config import EngineConfig
from llmbench.engine.loading.source import model_shape
from llmbench.engine.request import FinishReason, SamplingParams
from llmbench.engine.scheduling.check import (
    assert_batch_within_blocks,
    assert_block_manager_consistent,
    assert_engine_empty,
)

if TYPE_CHECKING:
    import torch

    from llmbench.engine.core.llm_engine import LLMEngine
    from llmbench.engine.scheduling.batch import ScheduledBatch

logger = logging.getLogger(__name__)

DEFAULT_SETTINGS = {
    "model": {"preset": "tiny", "executor": "null"},
    "engine": {"block_size": 16, "max_num_seqs": 64, "max_num_batched_tokens": 512},
}
MAX_PROMPT, MAX_OUTPUT = 96, 64  # the default request bounds
NUM_STEMS, STEM_LEN = 8, 48  # shared prompt stems, so prefix-cache hits meet preemption
STALL_STEPS = 1000  # steps without any output while work remains: the engine is stuck


@dataclass(frozen=True)
class SoakShape:
    """Request bounds: prompts of 1-max_prompt tokens, 1-max_output outputs. Shorter requests keep a
    real model's soak CI-sized."""

    max_prompt: int = MAX_PROMPT
    max_output: int = MAX_OUTPUT

    @property
    def max_len(self) -> int:
        return self.max_prompt + self.max_output


class SoakError(ValueError):
    """Soak settings that cannot work: a pool too small for one request, an unknown model, a bad key."""


@dataclass
class PoolRun:
    """One pass of the workload through one engine."""

    num_blocks: int
    preemptions: int
    steps: int
    wall_s: float  # includes the block-invariant walk after every step when checked_every_step
    checked_every_step: bool
    finished: int
    lost: int  # added but never finished
    duplicated: int  # finished more than once
    wrong_length: int  # finished with other than max_tokens outputs, or streamed tokens != final tokens
    leaked_blocks: int  # blocks not free at the end
    leak_check: str  # "ok", or the first broken invariant


@dataclass
class SoakResult:
    engine: dict[str, Any]  # the small pool's EngineConfig; the large pool differs in num_gpu_blocks only
    requests: int
    output_tokens: int
    small_pool: PoolRun
    large_pool: PoolRun
    mismatched_outputs: int  # requests whose greedy tokens differ between the two pools

    @property
    def passed(self) -> bool:
        runs = (self.small_pool, self.large_pool)
        broken = sum(r.lost + r.duplicated + r.wrong_length + r.leaked_blocks for r in runs)
        return not broken and not self.mismatched_outputs and all(r.leak_check == "ok" for r in runs)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def soak_engine_config(overrides: list[str], num_blocks: int, shape: SoakShape = SoakShape()) -> EngineConfig:
    """The soak's engine settings plus `model.*` / `engine.*` overrides, validated like a run config;
    the pool must hold at least the longest soak request."""
    for item in overrides:
        if not item.startswith(("model.", "engine.")):
            raise SoakError(f"{item.partition('=')[0]}: soak overrides take model.* or engine.* keys")
    config = parse_config(DEFAULT_SETTINGS, overrides, default_name="soak").engine
    config = dataclasses.replace(config, num_gpu_blocks=num_blocks)
    if num_blocks < _blocks_per_request(config, shape):
        raise SoakError(
            f"--blocks: the pool must hold one request of {_blocks_per_request(config, shape)} blocks"
        )
    _vocab_size(config)  # an unknown preset or unreadable path fails here, before any run
    return config


def soak_workload(
    num_requests: int, vocab_size: int, seed: int, shape: SoakShape = SoakShape()
) -> list[tuple[list[int], int]]:
    """(prompt, max_tokens) pairs: a random share of one of a few stems, then random tokens."""
    rng = np.random.default_rng(seed)
    stems = rng.integers(3, vocab_size, size=(NUM_STEMS, STEM_LEN)).tolist()
    workload = []
    for _ in range(num_requests):
        prompt_len = int(rng.integers(1, shape.max_prompt + 1))
        shared = int(rng.integers(0, min(prompt_len, STEM_LEN) + 1))
        stem = stems[int(rng.integers(NUM_STEMS))][:shared]
        tail = rng.integers(3, vocab_size, size=prompt_len - shared).tolist()
        workload.append((stem + tail, int(rng.integers(1, shape.max_output + 1))))
    return workload


def run_pool(
    config: EngineConfig, workload: list[tuple[list[int], int]], seed: int, check_every_step: bool
) -> tuple[PoolRun, dict[str, list[int]]]:
    """Feed the workload in bursts between steps (0-8 new requests before each step, seeded) until
    the engine drains; also returns the final tokens of each request by id."""
    # the engine (and torch) load here, so `llmbench soak` reports bad settings without them
    from llmbench.engine.core.llm_engine import LLMEngine

    engine = LLMEngine(config)
    if check_every_step:
        _check_each_batch(engine)
    try:
        return _drive(engine, workload, np.random.default_rng(seed), check_every_step)
    finally:
        engine.shutdown()


def _check_each_batch(engine: LLMEngine) -> None:
    """Before each forward: no KV slot it writes lies outside its sequence's blocks."""
    execute, block_size = engine.executor.execute, engine.block_manager.block_size

    def checked(batch: ScheduledBatch, **timing: Any) -> torch.Tensor:
        assert_batch_within_blocks(batch, block_size)
        return execute(batch, **timing)  # on CUDA the engine passes the step's GPU start event

    engine.executor.execute = checked


def _drive(
    engine: LLMEngine, workload: list[tuple[list[int], int]], rng: np.random.Generator, check_every_step: bool
) -> tuple[PoolRun, dict[str, list[int]]]:
    finals: dict[str, list[int]] = {}
    streamed: dict[str, list[int]] = {}
    duplicated = wrong_length = steps = idle = added = 0
    start = time.perf_counter()
    while added < len(workload) or engine.has_unfinished():
        for _ in range(min(int(rng.integers(0, 9)), len(workload) - added)):
            prompt, max_tokens = workload[added]
            engine.add_request(str(added), prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
            added += 1
        outputs = engine.step()
        steps += 1
        idle = 0 if outputs else idle + 1
        if idle > STALL_STEPS:
            raise RuntimeError(f"soak stalled: {STALL_STEPS} steps without output, {len(finals)} finished")
        for output in outputs:
            streamed.setdefault(output.request_id, []).extend(output.new_token_ids)
            if not output.finished:
                continue
            duplicated += output.request_id in finals
            finals[output.request_id] = output.token_ids
            max_tokens = workload[int(output.request_id)][1]
            wrong_length += (
                output.finish_reason is not FinishReason.LENGTH
                or len(output.token_ids) != max_tokens
                or streamed[output.request_id] != output.token_ids
            )
        if check_every_step:
            live = engine.scheduler.running + list(engine.scheduler.waiting)
            assert_block_manager_consistent(engine.block_manager, live)
    run = PoolRun(
        num_blocks=engine.block_manager.num_blocks,
        preemptions=engine.scheduler.num_preemptions,
        steps=steps,
        wall_s=round(time.perf_counter() - start, 2),
        checked_every_step=check_every_step,
        finished=len(finals),
        lost=len(workload) - len(finals),
        duplicated=duplicated,
        wrong_length=wrong_length,
        leaked_blocks=engine.block_manager.num_used,
        leak_check=_leak_check(engine),
    )
    return run, finals


def _leak_check(engine: LLMEngine) -> str:
    try:
        assert_engine_empty(engine)
    except AssertionError as e:
        return str(e) or "engine not empty"
    return "ok"


def run_soak(
    config: EngineConfig, num_requests: int, seed: int = 0, shape: SoakShape = SoakShape()
) -> SoakResult:
    """The workload through `config`'s small pool (block invariants checked after every step and
    every forward's KV writes inside its sequences' blocks), then through a pool that holds
    max_num_seqs of the longest requests, so nothing is preempted."""
    workload = soak_workload(num_requests, _vocab_size(config), seed, shape)
    logger.info("soak: %d requests, pool of %d blocks", num_requests, config.num_gpu_blocks)
    small, small_tokens = run_pool(config, workload, seed, check_every_step=True)
    logger.info("small pool: %d preemptions in %.1f s", small.preemptions, small.wall_s)
    large_pool = config.max_num_seqs * _blocks_per_request(config, shape)
    large_config = dataclasses.replace(config, num_gpu_blocks=large_pool)
    large, large_tokens = run_pool(large_config, workload, seed, check_every_step=False)
    logger.info("large pool: %d preemptions in %.1f s", large.preemptions, large.wall_s)
    mismatched = sum(1 for rid, tokens in small_tokens.items() if large_tokens.get(rid) != tokens)
    return SoakResult(
        engine=asdict(config),
        requests=num_requests,
        output_tokens=sum(max_tokens for _, max_tokens in workload),
        small_pool=small,
        large_pool=large,
        mismatched_outputs=mismatched,
    )


def _blocks_per_request(config: EngineConfig, shape: SoakShape) -> int:
    return -(-shape.max_len // config.block_size)


def _vocab_size(config: EngineConfig) -> int:
    try:
        return model_shape(config.model).vocab_size
    except (OSError, ValueError) as e:
        raise SoakError(f"model: {e}") from None


def soak_table(result: SoakResult) -> Table:
    """Both pools side by side, for the terminal."""
    table = Table(title=f"soak: {result.requests} requests, {result.output_tokens} output tokens")
    table.add_column("")
    table.add_column("small pool", justify="right")
    table.add_column("large pool", justify="right")
    small, large = asdict(result.small_pool), asdict(result.large_pool)
    for key in small:
        table.add_row(key, str(small[key]), str(large[key]))
    table.add_row("mismatched outputs", str(result.mismatched_outputs), "")
    table.add_row("passed", "yes" if result.passed else "[red]no[/red]", "")
    return table
