"""Multi-step scheduling: N decode forwards per schedule give exactly the tokens of N single steps,
whatever the window cuts through (stops, max_tokens, min_tokens, preemption, chunked prefill)."""

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.execution.null_executor import NullExecutor
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.request import FinishReason, SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq

from tests.engine.helpers import TINY_SHAPE, model_engine, null_engine, results, run, with_stops, workload


@pytest.mark.parametrize("num_steps", [2, 4, 8])
def test_null_executor_multi_step_equals_single_step(num_steps):
    requests = workload()
    reference = results(run(null_engine(), requests))
    streams = run(null_engine(num_scheduler_steps=num_steps, stream_multi_step=False), requests)
    assert results(streams) == reference
    # bursty: decodes come in chunks of at most num_steps tokens, prompts' first tokens alone
    assert all(len(o.new_token_ids) <= num_steps for outputs in streams.values() for o in outputs)
    assert max(len(o.new_token_ids) for outputs in streams.values() for o in outputs) == min(num_steps, 20)
    assert all(len(outputs[0].new_token_ids) == 1 for outputs in streams.values())
    # streamed: one token an output, one output per forward
    streamed = run(null_engine(num_scheduler_steps=num_steps), requests)
    assert results(streamed) == reference
    assert all(len(o.new_token_ids) == 1 for outputs in streamed.values() for o in outputs[:-1])


def test_stops_inside_a_window_drop_the_window_rest():
    requests = workload()
    reference = results(run(null_engine(), requests))
    # stops at output 3 (the middle of a 4-token window after the first token) and at output 1
    stopped = with_stops(requests, reference, {0: 3, 3: 1, 5: 6})
    single = results(run(null_engine(), stopped))
    multi = results(run(null_engine(num_scheduler_steps=4), stopped))
    assert multi == single
    assert single["0"] == (reference["0"][0][:4], FinishReason.STOP)
    # min_tokens: a stop token drawn before min_tokens outputs does not stop
    late = with_stops(requests, reference, {0: 1, 3: 1}, min_tokens=5)
    single = results(run(null_engine(), late))
    assert results(run(null_engine(num_scheduler_steps=4), late)) == single
    assert len(single["0"][0]) >= 5


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_eos_inside_a_window(ignore_eos):
    params = SamplingParams(max_tokens=11, ignore_eos=ignore_eos)
    reference = results(run(null_engine(), [([7, 8, 9], params)]))["0"][0]
    # a twin engine is told that the fourth output is EOS
    engines = [null_engine(), null_engine(num_scheduler_steps=8)]
    outcomes = []
    for engine in engines:
        engine.output_processor.eos_token_id = reference[3]
        outcomes.append(results(run(engine, [([7, 8, 9], params)]))["0"])
    expected = (reference, FinishReason.LENGTH) if ignore_eos else (reference[:4], FinishReason.STOP)
    assert outcomes == [expected, expected]


def test_preemption_and_no_chunking_with_multi_step():
    requests = workload(1)
    reference = results(run(null_engine(), requests))
    tight = null_engine(num_scheduler_steps=4, num_gpu_blocks=14, block_size=4)
    assert results(run(tight, requests)) == reference
    assert tight.scheduler.num_preemptions > 0
    whole = null_engine(num_scheduler_steps=4, chunked_prefill=False, max_num_batched_tokens=32)
    assert results(run(whole, requests)) == reference


def test_decode_only_batches_run_windows_with_blocks_reserved_ahead():
    # bursty windows: one step() a window, so each call below schedules
    engine = null_engine(
        num_scheduler_steps=4, block_size=4, max_num_batched_tokens=64, stream_multi_step=False
    )
    engine.add_request("a", [5] * 6, SamplingParams(max_tokens=6, ignore_eos=True))
    engine.add_request("b", [6] * 3, SamplingParams(max_tokens=20, ignore_eos=True))
    batches = []
    execute = engine.executor.execute
    engine.executor.execute = lambda batch: batches.append(batch) or execute(batch)
    engine.step()  # both prompts: one forward
    assert batches[0].num_steps == 1
    engine.step()  # decodes: a window of 4, blocks for 4 tokens past each sequence's input
    window = batches[1]
    assert window.num_steps == 4 and window.is_decode_only
    a, b = window.seqs
    assert (a.num_computed, len(a.block_table)) == (6, 3)  # positions 6..9 -> 10 tokens
    assert (b.num_computed, len(b.block_table)) == (3, 2)  # positions 3..6 -> 7 tokens
    engine.step()  # a has 1 output left: reserved up to its last output only (12 tokens)
    assert batches[2].num_steps == 4 and len(batches[2].seqs[0].block_table) == 3
    while engine.has_unfinished():
        engine.step()


def test_a_window_is_no_longer_than_the_most_outputs_left():
    # forwards past every sequence's last output would only hold the GPU: at a load's end the next
    # load's first step waited for them
    engine = null_engine(num_scheduler_steps=8, stream_multi_step=False)
    engine.add_request("a", [5] * 6, SamplingParams(max_tokens=12, ignore_eos=True))
    engine.add_request("b", [6] * 3, SamplingParams(max_tokens=3, ignore_eos=True))
    batches = []
    execute = engine.executor.execute
    engine.executor.execute = lambda batch: batches.append(batch) or execute(batch)
    while engine.has_unfinished():
        engine.step()
    assert [batch.num_steps for batch in batches] == [1, 8, 3]  # a: 12 = 1 + 8 + 3; b ends in the 8
    engine.add_request("c", [7] * 4, SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    assert [batch.num_steps for batch in batches[3:]] == [1, 1]  # one output left: a single step


def test_lookahead_needs_one_more_kv_slot_than_a_single_step():
    assert null_engine().scheduler.kv_tokens_needed(100) == 99
    assert null_engine(num_scheduler_steps=8).scheduler.kv_tokens_needed(100) == 100
    # a request filling the pool exactly fits single-step but not with a window running past it
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    single, multi = (
        null_engine(num_gpu_blocks=2, block_size=4),
        null_engine(num_gpu_blocks=2, block_size=4, num_scheduler_steps=2),
    )
    assert run(single, [([1] * 5, params)])["0"][-1].finish_reason is FinishReason.LENGTH
    multi.add_request("r", [1] * 5, params)
    (rejected,) = multi.step()
    assert rejected.finish_reason is FinishReason.REJECTED and "needs 3 KV blocks" in rejected.error


def test_null_executor_window_rows_are_the_single_steps():
    config = EngineConfig(model=ModelConfig(preset="tiny", executor="null"))
    executor = NullExecutor(config, resolve_model_facts(config))
    # tokens past the window's positions too: the null executor builds each forward's inputs from them
    seqs = [ScheduledSeq(i, [3] * (6 + i), 3 + i, 1, [0, 1], SamplingParams(), True, 1) for i in range(3)]
    window = torch.stack([f.host for f in executor.execute(ScheduledBatch(seqs, num_steps=3))])
    assert window.shape == (3, 3)
    for step in range(3):
        moved = [
            ScheduledSeq(s.seq_id, s.token_ids, s.num_computed + step, 1, [0, 1], s.sampling, True, 1)
            for s in seqs
        ]
        (single,) = executor.execute(ScheduledBatch(moved))
        assert window[step].tolist() == single.host.tolist()
    assert TINY_SHAPE.eos_token_id not in window.flatten().tolist()


def test_model_multi_step_equals_single_step_with_stops_and_preemption():
    """The real forward, inputs advanced on the device: greedy tokens equal single steps, including
    windows a stop or max_tokens cuts short, chunked prefill and a pool tight enough to preempt."""
    requests = workload(2)
    reference = results(run(model_engine(), requests))
    stopped = with_stops(requests, reference, {0: 5, 3: 2})
    expected = results(run(model_engine(), stopped))
    assert expected["0"][1] is FinishReason.STOP
    multi = model_engine(num_scheduler_steps=4, block_size=4, max_num_batched_tokens=32)
    assert results(run(multi, stopped)) == expected
    tight = model_engine(num_scheduler_steps=8, num_gpu_blocks=14, block_size=4)
    assert results(run(tight, requests)) == reference
    assert tight.scheduler.num_preemptions > 0


def test_a_one_token_recompute_chunk_runs_no_window():
    """A preempted sequence readmitted with one token of budget left runs a chunk that samples nothing.
    That is no decode, so its batch gets no window: a window's later forwards take sampled tokens as
    every row's input."""
    requests = [
        ([7] * 2, SamplingParams(max_tokens=13, ignore_eos=True)),
        ([8] * 2, SamplingParams(max_tokens=10, ignore_eos=True)),
        ([9] * 3, SamplingParams(max_tokens=8, ignore_eos=True)),
    ]
    reference = results(run(model_engine(), requests))
    engine = model_engine(num_scheduler_steps=4, num_gpu_blocks=5, block_size=4, max_num_batched_tokens=3)
    batches = []  # what each batch was when it ran: the scheduler refills its entries later
    execute = engine.executor.execute

    def recording_execute(batch):
        recompute = any(s.num_new == 1 and not s.sample and s.num_outputs for s in batch.seqs)
        batches.append((recompute, batch.num_steps, batch.is_decode_only))
        return execute(batch)

    engine.executor.execute = recording_execute
    assert results(run(engine, requests)) == reference
    chunked = [(steps, decode_only) for recompute, steps, decode_only in batches if recompute]
    assert chunked and all(steps == 1 and not decode_only for steps, decode_only in chunked)
    assert any(steps == 4 for _, steps, _ in batches)
