import math

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.null_executor import NullExecutor
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.models.shape import PRESETS
from llmbench.engine.observe.timing import StepRecord
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams
from llmbench.engine.scheduling.check import assert_engine_empty

TINY = PRESETS["tiny"]


@pytest.fixture
def make_engine():
    engines: list[LLMEngine] = []

    def make(**overrides) -> LLMEngine:
        overrides.setdefault("num_gpu_blocks", 256)
        engines.append(
            LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", executor="null"), **overrides))
        )
        return engines[-1]

    yield make
    for engine in engines:
        assert_engine_empty(engine)


def drain(engine: LLMEngine) -> list[RequestOutput]:
    outputs = []
    while engine.has_unfinished():
        outputs.extend(engine.step())
    return outputs


def finished_by_id(outputs: list[RequestOutput]) -> dict[str, RequestOutput]:
    return {o.request_id: o for o in outputs if o.finished}


def test_generate_returns_max_tokens_deterministically(make_engine):
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9] * 40]
    params = [SamplingParams(max_tokens=n) for n in (1, 5, 17)]
    first = make_engine().generate(prompts, params)
    again = make_engine(block_size=4, max_num_batched_tokens=8).generate(prompts, params)
    assert [len(tokens) for tokens in first] == [1, 5, 17]
    assert first == again  # batching and chunking change nothing about which tokens come out
    assert all(0 <= t < TINY.vocab_size and t != TINY.eos_token_id for tokens in first for t in tokens)


def test_generate_raises_on_a_bad_prompt(make_engine):
    engine = make_engine()
    with pytest.raises(ValueError, match="prompt 1: empty prompt"):
        engine.generate([[1, 2], []], SamplingParams(max_tokens=2))


def test_streamed_tokens_add_up_to_the_final_output(make_engine):
    engine = make_engine(block_size=4)
    engine.add_request("a", [3] * 10, SamplingParams(max_tokens=6))
    outputs = drain(engine)
    assert [len(o.new_token_ids) for o in outputs] == [1] * 6
    assert [t for o in outputs for t in o.new_token_ids] == outputs[-1].token_ids
    assert [o.finished for o in outputs] == [False] * 5 + [True]
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    # the request's first and last outputs describe it; the plain decodes between are a token each
    assert [o.num_prompt_tokens for o in outputs] == [10, 0, 0, 0, 0, 10]
    emits = [o.t_emit for o in outputs]
    assert emits == sorted(emits) and outputs[0].t_scheduled <= emits[0]


def test_bad_input_gives_error_outputs_while_others_finish(make_engine):
    engine = make_engine()
    engine.add_request("good", [1, 2, 3], SamplingParams(max_tokens=3))
    bad = {
        "empty": ([], SamplingParams()),
        "out-of-vocab": ([1, TINY.vocab_size], SamplingParams()),
        "negative": ([-1, 2], SamplingParams()),
        "not-ints": ([1.5, 2], SamplingParams()),
        "bad-params": ([1, 2], SamplingParams(max_tokens=0)),
        "wrong-params-type": ([1, 2], {"max_tokens": 3}),
        "good": ([4, 5], SamplingParams()),  # duplicate of a live id
    }
    for request_id, (prompt, params) in bad.items():
        engine.add_request(request_id, prompt, params)
    first_step = list(engine.step())
    errors = [o for o in first_step if o.finish_reason is FinishReason.ERROR]
    assert [o.request_id for o in errors] == list(bad)
    messages = {o.request_id: o.error for o in errors}
    assert messages["empty"] == "empty prompt"
    assert "vocabulary" in messages["out-of-vocab"] and "vocabulary" in messages["negative"]
    assert "integers" in messages["not-ints"]
    assert "max_tokens must be >= 1" in messages["bad-params"]
    assert "SamplingParams" in messages["wrong-params-type"]
    assert "duplicate" in messages["good"]
    finished = finished_by_id(first_step + drain(engine))
    assert finished["good"].finish_reason is FinishReason.LENGTH
    assert len(finished["good"].token_ids) == 3


def test_stop_tokens_and_min_tokens(make_engine):
    every_token = tuple(range(TINY.vocab_size))
    prompts = [[7, 8, 9]] * 2
    params = [
        SamplingParams(max_tokens=8, stop_token_ids=every_token),
        SamplingParams(max_tokens=8, stop_token_ids=every_token, min_tokens=3),
    ]
    assert [len(tokens) for tokens in make_engine().generate(prompts, params)] == [1, 3]


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_eos_stops_unless_ignored(make_engine, ignore_eos):
    params = SamplingParams(max_tokens=6, ignore_eos=ignore_eos)
    (reference,) = make_engine().generate([[7, 8, 9]], params)
    # the null executor never samples the model's EOS; a twin engine (same seq ids, same tokens)
    # is told that the second token is EOS
    twin = make_engine()
    twin.output_processor.eos_token_id = reference[1]
    twin.add_request("r", [7, 8, 9], params)
    (output,) = finished_by_id(drain(twin)).values()
    if ignore_eos:
        assert output.finish_reason is FinishReason.LENGTH and output.token_ids == reference
    else:
        assert output.finish_reason is FinishReason.STOP and output.token_ids == reference[:2]


def test_abort_waiting_and_running_requests(make_engine):
    engine = make_engine(max_num_seqs=1)
    engine.add_request("running", [1] * 20, SamplingParams(max_tokens=50))
    engine.add_request("waiting", [2] * 20, SamplingParams(max_tokens=5))
    engine.add_request("kept", [3] * 5, SamplingParams(max_tokens=2))
    engine.step()
    engine.step()
    assert engine.block_manager.num_used == 2
    engine.abort("running")
    engine.abort("waiting")
    engine.abort("never-added")
    assert engine.block_manager.num_used == 0
    outputs = drain(engine)
    finished = finished_by_id(outputs)
    assert finished["running"].finish_reason is FinishReason.ABORT
    assert len(finished["running"].token_ids) == 2
    assert finished["waiting"].finish_reason is FinishReason.ABORT
    assert finished["waiting"].token_ids == []
    assert len(finished["kept"].token_ids) == 2
    assert sum(o.finished for o in outputs) == 3


def test_cached_tokens_are_reported_per_request(make_engine):
    engine = make_engine(block_size=4)
    engine.generate([list(range(1, 11))], SamplingParams(max_tokens=2))
    engine.add_request("again", list(range(1, 11)), SamplingParams(max_tokens=2))
    engine.add_request("other", list(range(20, 30)), SamplingParams(max_tokens=2))
    finished = finished_by_id(drain(engine))
    assert finished["again"].num_cached_tokens == 8
    assert finished["other"].num_cached_tokens == 0


def test_step_records_describe_each_step(make_engine):
    engine = make_engine(block_size=4, max_num_batched_tokens=16)
    engine.add_request("a", [1] * 10, SamplingParams(max_tokens=3))
    engine.add_request("b", [2] * 10, SamplingParams(max_tokens=3))
    drain(engine)
    records = engine.drain_step_records()
    assert engine.drain_step_records() == []
    assert all(isinstance(r, StepRecord) for r in records)
    assert [r.step for r in records] == list(range(len(records)))
    # step 0: a whole + 6 tokens of b; step 1: a decodes while b finishes its prompt
    assert [(r.num_prefill_tokens, r.num_decode_seqs) for r in records[:2]] == [(16, 0), (4, 1)]
    assert records[0].num_blocks_used == 5 and records[0].num_running == 2
    for r in records:
        assert r.t_start <= r.t_end
        phases = r.schedule_ms + r.prepare_ms + r.sample_ms + r.output_ms
        assert 0 < phases <= (r.t_end - r.t_start) * 1e3 + 1e-6
        assert r.ipc_ms == 0.0 and math.isnan(r.gpu_ms) and r.num_steps == 1


def test_step_timing_off_keeps_no_records(make_engine):
    engine = make_engine(step_timing=False)
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2))
    assert engine.drain_step_records() == []


def null_executor(config: EngineConfig) -> NullExecutor:
    return NullExecutor(config, resolve_model_facts(config))


def test_null_executor_shape_and_pool():
    config = EngineConfig(model=ModelConfig(preset="tiny", executor="null"), block_size=16, max_num_seqs=4)
    executor = null_executor(config)
    assert executor.shape == TINY
    assert executor.max_model_len == TINY.max_position_embeddings
    assert executor.num_blocks == 4 * TINY.max_position_embeddings // 16
    # sized in the dtype a GPU run would hold (auto: bfloat16), wherever the null executor runs
    sized = EngineConfig(model=ModelConfig(preset="tiny", executor="null"), kv_cache_memory_gb=0.001)
    assert null_executor(sized).num_blocks == int(0.001 * 2**30 // (TINY.kv_bytes_per_token(2) * 16))
    with pytest.raises(ValueError, match="unknown model preset"):
        null_executor(EngineConfig(model=ModelConfig(preset="nope", executor="null")))
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        null_executor(EngineConfig(model=ModelConfig(preset="tiny", executor="null"), max_model_len=4096))
    null = ModelConfig(preset="tiny", executor="null")
    assert null_executor(EngineConfig(model=null, num_gpu_blocks=1 << 24)).num_blocks == 1 << 24
    with pytest.raises(
        ValueError, match=r"engine.num_gpu_blocks: 16777217 KV blocks is more than .* 16777216"
    ):
        null_executor(EngineConfig(model=null, num_gpu_blocks=(1 << 24) + 1))
    with pytest.raises(ValueError, match="engine.kv_cache_memory_gb: .* KV blocks is more than"):
        null_executor(EngineConfig(model=null, kv_cache_memory_gb=1e6))
