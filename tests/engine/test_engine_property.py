"""Random add / step / abort sequences against small pools and budgets: whatever happens, every
request ends exactly once with a sane length, and the engine ends empty."""

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.check import assert_block_manager_consistent, assert_engine_empty
from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.request import FinishReason, RequestOutput, SamplingParams

MAX_MODEL_LEN = 48

configs = st.builds(
    lambda block_size, num_blocks, budget, max_num_seqs, chunked, caching: EngineConfig(
        model=ModelConfig(preset="tiny", executor="null"),
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        max_model_len=MAX_MODEL_LEN,
        chunked_prefill=chunked,
        prefix_caching=caching,
    ),
    block_size=st.sampled_from([1, 2, 4, 8, 16]),
    num_blocks=st.integers(2, 40),
    budget=st.integers(1, 64),
    max_num_seqs=st.integers(1, 6),
    chunked=st.booleans(),
    caching=st.booleans(),
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
    engine = LLMEngine(config)
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

    assert set(finals) == set(added)
    # coverage signposts for --hypothesis-show-statistics
    event(f"preempted: {engine.scheduler.num_preemptions > 0}")
    event(f"prefix hit: {any(o.num_cached_tokens for o in finals.values())}")
    event(f"rejected: {any(o.finish_reason is FinishReason.REJECTED for o in finals.values())}")
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
