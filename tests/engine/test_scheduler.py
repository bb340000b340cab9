import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams
from llmbench.engine.scheduling.block_manager import BlockManager
from llmbench.engine.scheduling.check import (
    assert_batch_within_blocks,
    assert_block_manager_consistent,
    assert_engine_empty,
)
from llmbench.engine.scheduling.scheduler import Scheduler
from llmbench.engine.scheduling.sequence import Sequence

GREEDY = SamplingParams(max_tokens=4, ignore_eos=True)


@pytest.fixture
def make_engine():
    """Null-executor engines whose every forward is recorded as (seq_id, num_computed, num_new,
    sample) per sequence; each must end empty."""
    engines: list[LLMEngine] = []

    def make(**overrides) -> LLMEngine:
        overrides.setdefault("num_gpu_blocks", 256)  # small pools keep the per-step checks fast
        engine = LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", executor="null"), **overrides))
        engine.batches = []
        execute = engine.executor.execute

        def recording_execute(batch):
            engine.batches.append([(s.seq_id, s.num_computed, s.num_new, s.sample) for s in batch.seqs])
            return execute(batch)

        engine.executor.execute = recording_execute
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        assert_engine_empty(engine)


def run(engine: LLMEngine, max_steps: int = 2000) -> dict[str, RequestOutput]:
    """Step to the end, checking block invariants each step; the finished output of each request."""
    finished: dict[str, RequestOutput] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished():
            return finished
        for output in engine.step():
            if output.finished:
                assert output.request_id not in finished
                finished[output.request_id] = output
        live = engine.scheduler.running + list(engine.scheduler.waiting)
        assert_block_manager_consistent(engine.block_manager, live)
    raise AssertionError("engine did not finish")


def add_prompts(engine: LLMEngine, lengths: list[int], params: SamplingParams = GREEDY) -> None:
    for i, length in enumerate(lengths):
        engine.add_request(f"r{i}", [10 + i] * length, params)


def test_chunked_prefill_splits_prompts_to_fill_the_budget(make_engine):
    engine = make_engine(max_num_batched_tokens=32, chunked_prefill=True)
    add_prompts(engine, [20, 20, 20])
    run(engine)
    assert engine.batches[0] == [(0, 0, 20, True), (1, 0, 12, False)]
    # decode first, then the rest of prompt 1, then prompt 2 fits whole: 1 + 8 + 20 tokens
    assert engine.batches[1] == [(0, 20, 1, True), (1, 12, 8, True), (2, 0, 20, True)]
    assert all(sum(n for _, _, n, _ in batch) <= 32 for batch in engine.batches)


def test_token_budget_is_respected_under_load(make_engine):
    engine = make_engine(max_num_batched_tokens=24, max_num_seqs=8, block_size=4)
    add_prompts(engine, [17, 5, 30, 9, 1, 23], SamplingParams(max_tokens=7, ignore_eos=True))
    finished = run(engine)
    assert max(sum(n for _, _, n, _ in batch) for batch in engine.batches) == 24
    assert all(sum(n for _, _, n, _ in batch) <= 24 for batch in engine.batches)
    assert all(len(out.token_ids) == 7 for out in finished.values())


def test_without_chunked_prefill_a_prefill_step_carries_no_decodes(make_engine):
    engine = make_engine(max_num_batched_tokens=32, chunked_prefill=False)
    add_prompts(engine, [20, 20, 20])
    run(engine)
    assert engine.batches[:3] == [[(0, 0, 20, True)], [(1, 0, 20, True)], [(2, 0, 20, True)]]
    assert engine.batches[3] == [(0, 20, 1, True), (1, 20, 1, True), (2, 20, 1, True)]
    for batch in engine.batches:
        num_prefill = sum(1 for _, _, n, _ in batch if n > 1)
        assert num_prefill == 0 or num_prefill == len(batch)
    records = engine.drain_step_records()
    assert [(r.num_prefill_tokens, r.num_decode_seqs) for r in records[:4]] == [
        (20, 0),
        (20, 0),
        (20, 0),
        (0, 3),
    ]


def test_without_chunked_prefill_a_lone_long_prompt_runs_whole(make_engine):
    engine = make_engine(max_num_batched_tokens=16, chunked_prefill=False)
    add_prompts(engine, [40, 8])
    run(engine)
    assert engine.batches[0] == [(0, 0, 40, True)]
    assert engine.batches[1] == [(1, 0, 8, True)]


def test_max_num_seqs_caps_the_running_set(make_engine):
    engine = make_engine(max_num_seqs=2)
    add_prompts(engine, [3, 3, 3, 3, 3])
    finished = run(engine)
    assert max(len(batch) for batch in engine.batches) == 2
    assert len(finished) == 5


def test_preemption_with_a_tiny_pool_loses_no_request(make_engine):
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    roomy = make_engine(block_size=4)
    add_prompts(roomy, [5, 6, 7, 8], params)
    expected = {rid: out.token_ids for rid, out in run(roomy).items()}

    tight = make_engine(block_size=4, num_gpu_blocks=6)  # each request needs 4 blocks at its end
    add_prompts(tight, [5, 6, 7, 8], params)
    finished = run(tight)
    assert tight.scheduler.num_preemptions > 0
    assert sum(r.num_preempted for r in tight.drain_step_records()) == tight.scheduler.num_preemptions
    assert all(out.finish_reason is FinishReason.LENGTH for out in finished.values())
    # recompute keeps generated tokens, so outputs match the run that never preempted
    assert {rid: out.token_ids for rid, out in finished.items()} == expected


def test_preempted_sequence_recomputes_prompt_and_outputs(make_engine):
    engine = make_engine(block_size=2, num_gpu_blocks=5, prefix_caching=False)
    add_prompts(engine, [3, 3], SamplingParams(max_tokens=6, ignore_eos=True))
    run(engine)
    # the newest sequence (1) is preempted, then resumes with a prefill over prompt + its outputs
    recompute = [entry for batch in engine.batches for entry in batch if entry[0] == 1 and entry[2] > 1]
    assert recompute[0] == (1, 0, 3, True)
    assert len(recompute) == 2 and recompute[1][1] == 0 and recompute[1][2] > 3


def test_too_long_requests_are_rejected_while_others_finish(make_engine):
    engine = make_engine(max_model_len=64, block_size=4, num_gpu_blocks=10)
    engine.add_request("ok", [5] * 20, SamplingParams(max_tokens=8))
    engine.add_request("too-long", [5] * 60, SamplingParams(max_tokens=10))
    engine.add_request("too-big-for-pool", [5] * 40, SamplingParams(max_tokens=10))  # needs 13 blocks
    engine.add_request("fits-exactly", [5] * 30, SamplingParams(max_tokens=11))  # 40 tokens in KV
    finished = run(engine)
    assert finished["too-long"].finish_reason is FinishReason.REJECTED
    assert "max_model_len 64" in finished["too-long"].error
    assert finished["too-big-for-pool"].finish_reason is FinishReason.REJECTED
    assert "pool has 10" in finished["too-big-for-pool"].error
    assert len(finished["ok"].token_ids) == 8
    assert len(finished["fits-exactly"].token_ids) == 11


def test_prefix_cache_hit_skips_cached_tokens(make_engine):
    engine = make_engine(block_size=4)
    engine.add_request("a", list(range(1, 11)), GREEDY)
    run(engine)
    engine.add_request("b", list(range(1, 11)) + [7, 7], GREEDY)
    finished = run(engine)
    assert finished["b"].num_cached_tokens == 8
    assert engine.batches[-4][0][1:3] == (8, 4)  # prefill starts after the cached 8 tokens


def readmitted_one_token_short(num_blocks: int) -> tuple[Scheduler, Sequence]:
    """A sequence of 9 tokens (6 prompt, 3 outputs) preempted with its two full blocks cached, waiting
    in a scheduler with 8-step windows over blocks of 4: readmitted, its prefix hit leaves one token."""
    config = EngineConfig(
        model=ModelConfig(preset="tiny", executor="null"),
        block_size=4,
        num_gpu_blocks=num_blocks,
        num_scheduler_steps=8,
    )
    block_manager = BlockManager(num_blocks, 4, prefix_caching=True)
    scheduler = Scheduler(config, block_manager)
    seq = Sequence(0, "r", [5] * 6, SamplingParams(max_tokens=20, ignore_eos=True), 0.0)
    seq.token_ids += [7, 8, 9]
    assert block_manager.allocate(seq, 9)
    seq.num_computed = 8
    block_manager.cache_full_blocks(seq)
    block_manager.free(seq)
    seq.num_computed = 0
    scheduler.add(seq)
    return scheduler, seq


def test_a_decode_readmitted_from_a_prefix_hit_gets_blocks_for_its_window():
    scheduler, seq = readmitted_one_token_short(num_blocks=8)
    out = scheduler.schedule()
    (entry,) = out.batch.seqs
    assert (entry.num_computed, entry.num_new, entry.sample) == (8, 1, True)
    assert out.batch.num_steps == 8
    # positions 8..15: four blocks, the first two from the cache
    assert_batch_within_blocks(out.batch, 4)
    assert len(seq.block_table) == 4 and seq.num_cached_blocks == 2
    scheduler.abort(seq)


def test_a_pool_without_room_for_the_window_runs_the_longest_it_holds():
    scheduler, seq = readmitted_one_token_short(num_blocks=3)
    out = scheduler.schedule()
    # no fourth block: positions 8..11 fill the third, nobody is preempted for the rest
    assert out.batch.num_steps == 4 and out.num_preempted == 0
    assert_batch_within_blocks(out.batch, 4)
    assert len(seq.block_table) == 3
    scheduler.abort(seq)
