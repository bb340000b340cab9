"""Random add / step / abort sequences against small pools and budgets, over every scheduling toggle
(block size, multi-step windows streamed or bursty, chunked prefill, prefix caching, async output,
async scheduling) and with or without a simulated forward time (the null executor's device, read by
the step timer): whatever happens, every request ends exactly once with a sane length, no forward
writes KV outside its sequences' blocks, the engine ends empty, and a timed device's steps all get
their device times."""

import math

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams
from llmbench.engine.scheduling.check import (
    assert_batch_within_blocks,
    assert_block_manager_consistent,
    assert_engine_empty,
)

MAX_MODEL_LEN = 48


def null_config(pool_tokens: int, block_size: int, forward_ms: float = 0.0, **fields) -> EngineConfig:
    """The pool is drawn in tokens, so every block size meets pools from hopeless to roomy."""
    num_blocks = max(2, pool_tokens // block_size)
    return EngineConfig(
        model=ModelConfig(preset="tiny", executor="null", null_forward_ms=forward_ms),
        max_model_len=MAX_MODEL_LEN,
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        **fields,
    )


toggles = {
    "max_num_batched_tokens": st.integers(1, 64),
    "max_num_seqs": st.integers(1, 6),
    "chunked_prefill": st.booleans(),
    "async_output": st.booleans(),
    "async_scheduling": st.booleans(),
    "stream_multi_step": st.booleans(),
}
configs = st.builds(
    null_config,
    pool_tokens=st.integers(8, 160),
    block_size=st.sampled_from([1, 2, 4, 8, 16]),
    prefix_caching=st.booleans(),
    num_scheduler_steps=st.sampled_from([1, 2, 4, 8]),
    forward_ms=st.sampled_from([0.0, 0.05]),
    **toggles,
)
# the corner of issue 12's crash: windows longer than a block, prefix hits, pools that preempt
window_configs = st.builds(
    null_config,
    pool_tokens=st.integers(16, 96),
    block_size=st.sampled_from([1, 2, 4]),
    prefix_caching=st.just(True),
    num_scheduler_steps=st.sampled_from([4, 8]),
    **toggles,
)

# prompts drawn from a few shared stems so prefix-cache hits actually happen
prompts = st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(1, 50)).map(
    lambda t: [t[0] + 3] * 6 + [t[2]] * t[1]
)
adds = st.tuples(
    st.just("add"), prompts, st.integers(1, 12), st.integers(0, 3), st.sampled_from([(), (100,), (7, 9)])
)
# a burst of requests first (so pools fill and preempt), then anything interleaved
operations = st.tuples(
    st.lists(adds, min_size=1, max_size=8),
    st.lists(
        st.one_of(adds, st.tuples(st.just("step")), st.tuples(st.just("abort"), st.integers(0, 30))),
        max_size=30,
    ),
).map(lambda parts: parts[0] + parts[1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, ops=operations)
def test_every_request_ends_exactly_once(config: EngineConfig, ops: list[tuple]) -> None:
    run_checked(config, ops)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=window_configs, ops=operations)
def test_windows_longer_than_a_block_stay_in_their_blocks(config: EngineConfig, ops: list[tuple]) -> None:
    run_checked(config, ops)


def run_checked(config: EngineConfig, ops: list[tuple]) -> None:
    """Apply ops to a fresh engine, then step it empty, checking the block invariants after every
    step and every forward's KV slots before it runs; then check each request's one ending."""
    engine = LLMEngine(config)
    execute = engine.executor.execute

    def checked_execute(batch, before_launch=None):
        assert_batch_within_blocks(batch, config.block_size)
        return execute(batch, before_launch)

    engine.executor.execute = checked_execute
    added: dict[str, SamplingParams] = {}
    streamed: dict[str, list[int]] = {}
    finals: dict[str, RequestOutput] = {}

    def step() -> None:
        for output in engine.step():
            assert output.request_id not in finals, f"{output.request_id} ended twice"
            streamed.setdefault(output.request_id, []).extend(output.new_token_ids)
            if output.finished:
                finals[output.request_id] = output
        live = engine.scheduler.running + list(engine.scheduler.waiting)
        assert_block_manager_consistent(engine.block_manager, live)
        assert len(engine.scheduler.running) <= config.max_num_seqs

    for op in ops:
        if op[0] == "add":
            _, prompt, max_tokens, min_tokens, stops = op
            request_id = f"r{len(added)}"
            params = SamplingParams(
                max_tokens=max_tokens, min_tokens=min(min_tokens, max_tokens), stop_token_ids=stops
            )
            added[request_id] = params
            engine.add_request(request_id, prompt, params)
        elif op[0] == "step":
            step()
        elif added:
            engine.abort(f"r{op[1] % len(added)}")

    for _ in range(5000):
        if not engine.has_unfinished():
            break
        step()
    assert_engine_empty(engine)
    records = engine.drain_step_records()  # nothing left running: every device time is read here
    if config.model.null_forward_ms:
        launched = [r for r in records if r.num_prefill_tokens + r.num_decode_seqs]
        assert all(not math.isnan(r.gpu_ms) and r.gpu_ms > 0 for r in launched)

    assert set(finals) == set(added)
    # coverage signposts for --hypothesis-show-statistics
    event(f"preempted: {engine.scheduler.num_preemptions > 0}")
    event(f"prefix hit: {any(o.num_cached_tokens for o in finals.values())}")
    event(f"rejected: {any(o.finish_reason is FinishReason.REJECTED for o in finals.values())}")
    event(f"windows: {config.num_scheduler_steps > 1}, streamed: {config.stream_multi_step}")
    event(f"async output: {config.async_output}, async scheduling: {config.async_scheduling}")
    event(f"simulated forwards: {config.model.null_forward_ms > 0}")
    for request_id, output in finals.items():
        params = added[request_id]
        assert output.token_ids == streamed[request_id]
        assert len(output.token_ids) <= params.max_tokens
        if output.finish_reason is FinishReason.LENGTH:
            assert len(output.token_ids) == params.max_tokens
        elif output.finish_reason is FinishReason.STOP:
            assert len(output.token_ids) >= params.min_tokens
            assert output.token_ids[-1] in params.stop_token_ids
        elif output.finish_reason is FinishReason.REJECTED:
            assert output.token_ids == [] and output.error
        else:
            assert output.finish_reason is FinishReason.ABORT
