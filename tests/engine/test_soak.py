"""The preemption soak at CI size: a few hundred requests through a pool that preempts on most steps,
then a pool that never does. The full size is `llmbench soak` (docs/measurements/cpu/soak.json). The null
executor's tokens depend only on (sequence, position), so it checks bookkeeping; the tiny model's
depend on every input token and KV slot, so its soak checks the data path too."""

import dataclasses
import json

import pytest
from llmbench.engine.models.shape import PRESETS
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.studies.soak import (
    MAX_OUTPUT,
    MAX_PROMPT,
    SoakShape,
    run_pool,
    run_soak,
    soak_engine_config,
    soak_workload,
)

NUM_REQUESTS = 300
SMALL_POOL = 24  # blocks of 16: 2-3 of the longest requests at once, against up to 64 admitted
TINY_MODEL = ["model.executor=model", "model.dtype=float32", "model.device=cpu", "engine.block_size=4"]
SHORT = SoakShape(max_prompt=24, max_output=16)  # the tiny model's soak: ~2 s on 2 cores


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["engine.chunked_prefill=false"],
        ["engine.prefix_caching=false", "engine.block_size=8"],
        ["engine.num_scheduler_steps=4", "engine.async_output=true"],
        # windows longer than a block, readmitted prefix hits one token short: issue 12's crash
        ["engine.num_scheduler_steps=8", "engine.block_size=4"],
    ],
    ids=["default", "whole-prompts", "no-prefix-cache", "multi-step-async", "window-past-blocks"],
)
def test_soak_loses_nothing_and_matches_a_large_pool(overrides):
    blocks = {"engine.block_size=8": SMALL_POOL * 2, "engine.block_size=4": 40}
    blocks = next((blocks[o] for o in overrides if o in blocks), SMALL_POOL)
    result = run_soak(soak_engine_config(overrides, blocks), NUM_REQUESTS, seed=1)
    small, large = result.small_pool, result.large_pool
    assert result.passed, result.to_dict()
    assert small.finished == large.finished == NUM_REQUESTS
    assert small.lost == small.duplicated == small.wrong_length == small.leaked_blocks == 0
    assert small.preemptions > 100 and large.preemptions == 0
    assert result.mismatched_outputs == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [["engine.async_output=true"], ["engine.async_output=true", "engine.num_scheduler_steps=4"]],
    ids=["async", "async-multi-step"],
)
def test_tiny_model_soak_gives_the_large_pools_greedy_tokens(overrides):
    """Recomputed KV, prefix hits and decodes fed from the step in flight under constant preemption
    yield the tokens of a pool that never preempts (dropping the async feed in input_batch.py gives
    124 and 257 of 300 wrong)."""
    result = run_soak(
        soak_engine_config(TINY_MODEL + overrides, 12, SHORT), NUM_REQUESTS, seed=1, shape=SHORT
    )
    assert result.passed, result.to_dict()
    assert result.mismatched_outputs == 0
    assert result.small_pool.preemptions > 100 and result.large_pool.preemptions == 0
    assert result.small_pool.finished == NUM_REQUESTS


def test_model_async_windows_under_preemption_give_the_sync_tokens():
    """The real forward, async output, 4-step windows and a pool that preempts every few steps: greedy
    tokens equal a synchronous single-step engine that never preempts. A sequence preempted while its
    step is in flight still holds placeholders, so the scheduler admits nothing in a step that
    preempted; without that guard 3 of these 80 requests get other tokens."""
    workload = soak_workload(80, PRESETS["tiny"].vocab_size, seed=3, shape=SHORT)
    overrides = ["engine.async_output=true", "engine.num_scheduler_steps=4"]
    tight = soak_engine_config(TINY_MODEL + overrides, 12, SHORT)
    run, tokens = run_pool(tight, workload, seed=3, check_every_step=True)
    roomy = dataclasses.replace(tight, async_output=False, num_scheduler_steps=1, num_gpu_blocks=640)
    reference, expected = run_pool(roomy, workload, seed=3, check_every_step=False)
    assert run.preemptions > 20 and reference.preemptions == 0
    assert run.finished == len(workload) and run.wrong_length == 0
    assert tokens == expected


def test_soak_workload_is_seeded_and_within_bounds():
    workload = soak_workload(200, vocab_size=512, seed=3)
    assert workload == soak_workload(200, vocab_size=512, seed=3)
    assert workload != soak_workload(200, vocab_size=512, seed=4)
    assert all(1 <= len(prompt) <= MAX_PROMPT and 1 <= n <= MAX_OUTPUT for prompt, n in workload)
    assert all(3 <= t < 512 for prompt, _ in workload for t in prompt)
    # shared stems: many prompts start alike, so the prefix cache is exercised under preemption
    firsts = [tuple(prompt[:8]) for prompt, _ in workload if len(prompt) >= 8]
    assert len(set(firsts)) < len(firsts) // 2


def test_soak_command_writes_its_figures(tmp_path):
    out = tmp_path / "soak.json"
    args = ["soak", "--requests", "120", "--blocks", str(SMALL_POOL), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["command"].startswith("llmbench") and data["passed"] is True
    assert data["requests"] == 120 and data["small_pool"]["finished"] == 120
    assert data["small_pool"]["preemptions"] > 0 and data["small_pool"]["leak_check"] == "ok"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--blocks", "4"], "--blocks"),
        (["--set", "workload.num_requests=3"], "workload.num_requests"),
        (["--set", "engine.block_size=zero"], "engine.block_size"),
        (["--set", "model.preset=nope"], "model"),
    ],
)
def test_soak_rejects_bad_settings_with_exit_2(args, named):
    result = CliRunner().invoke(app, ["soak", "--requests", "5", *args])
    assert result.exit_code == 2
    assert named in result.output
