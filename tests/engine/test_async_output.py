"""Overlapped steps, both ways: async output (step n read back, then step n+1 scheduled and launched
before step n's outputs are processed) and async scheduling (step n+1 launched before step n is read
back). Either way step n+1's decodes are fed from step n's tokens on the device; outputs must be
token-identical to the synchronous loop, and a token sampled after a sequence's stop is never emitted."""

import pytest
from llmbench.engine.outputs.in_flight import InFlightStep
from llmbench.engine.request import FinishReason, SamplingParams

from tests.engine.helpers import model_engine, null_engine, results, run, with_stops, workload


def seeded(requests):
    return [
        (
            prompt,
            SamplingParams(max_tokens=p.max_tokens, temperature=0.8, top_p=0.95, seed=i, ignore_eos=True),
        )
        for i, (prompt, p) in enumerate(requests)
    ]


MODES = ["async_output", "async_scheduling"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "bursty"])
@pytest.mark.parametrize("num_steps", [1, 4])
def test_null_executor_async_equals_sync(num_steps, stream, mode):
    requests = workload()
    reference = results(run(null_engine(), requests))
    stopped = with_stops(requests, reference, {0: 3, 3: 1, 5: 6}, min_tokens=2)
    expected = results(run(null_engine(), stopped))
    for overrides in (
        {},
        {"max_num_batched_tokens": 16, "block_size": 4},  # chunked prompts mixed with decodes
        {"num_gpu_blocks": 16, "block_size": 4},  # preemption
        {"chunked_prefill": False, "max_num_batched_tokens": 32},
        {"prefix_caching": False},
    ):
        engine = null_engine(
            num_scheduler_steps=num_steps, stream_multi_step=stream, **{mode: True}, **overrides
        )
        assert results(run(engine, stopped)) == expected, overrides
    assert expected["0"] == (reference["0"][0][:4], FinishReason.STOP)


@pytest.mark.parametrize("mode", MODES)
def test_async_preempts_sequences_whose_step_is_in_flight(mode):
    requests = workload(1)
    expected = results(run(null_engine(), requests))
    engine = null_engine(num_gpu_blocks=14, block_size=4, **{mode: True})
    assert results(run(engine, requests)) == expected
    assert engine.scheduler.num_preemptions > 0


@pytest.mark.parametrize("mode", MODES)
def test_outputs_lag_one_step_and_the_next_input_comes_from_the_device(mode):
    engine = null_engine(**{mode: True})
    engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    batches = []
    execute = engine.executor.execute
    engine.executor.execute = lambda batch: batches.append(batch) or execute(batch)
    assert not engine.step()  # the prompt is launched; nothing read back yet
    (first,) = engine.step()  # the first decode is launched, then the prompt's token is processed
    assert first.new_token_ids == [engine.scheduler.running[0].token_ids[3]]
    assert (batches[1].feed_rows, batches[1].feed_cols) == ([0], [0])
    assert batches[1].feed_tokens is not None
    outputs = [first]
    while engine.has_unfinished():
        outputs += engine.step()
    assert [len(o.new_token_ids) for o in outputs] == [1, 1, 1] and outputs[-1].finished
    # the decode launched after the last token was sampled, before it was known to be the last,
    # never runs: max_tokens was reached by counting, placeholders included
    assert len(batches) == 3


@pytest.mark.parametrize("mode", MODES)
def test_abort_while_in_flight_reports_only_tokens_read_back(mode):
    engine = null_engine(**{mode: True})
    engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=50, ignore_eos=True))
    engine.add_request("b", [4, 5], SamplingParams(max_tokens=5, ignore_eos=True))
    streamed = []
    for _ in range(4):
        streamed += [o for o in engine.step() if o.request_id == "a"]
    engine.abort("a")
    outputs = list(engine.step())
    (aborted,) = [o for o in outputs if o.request_id == "a"]
    assert aborted.finish_reason is FinishReason.ABORT
    assert aborted.token_ids == [t for o in streamed for t in o.new_token_ids]
    assert len(aborted.token_ids) == 3
    while engine.has_unfinished():
        outputs += engine.step()
    assert all(o.request_id == "b" for o in outputs if o is not aborted)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_model_async_equals_sync(sampling, mode):
    """The real forward on the CPU: every decode after the first takes its input from the previous
    step's device tensor, yet tokens match the synchronous loop exactly."""
    requests = workload(3) if sampling == "greedy" else seeded(workload(3))
    reference = results(run(model_engine(), requests))
    stopped = with_stops(requests, reference, {0: 4, 5: 2}) if sampling == "greedy" else requests
    expected = results(run(model_engine(), stopped))
    for overrides in (
        {},
        {"num_gpu_blocks": 14, "block_size": 4},  # preemption
        {"max_num_batched_tokens": 16, "num_scheduler_steps": 4},  # chunked prefill, multi-step
    ):
        engine = model_engine(**{mode: True}, **overrides)
        assert results(run(engine, stopped)) == expected, overrides
        if "block_size" in overrides:
            assert engine.scheduler.num_preemptions > 0
    # a prompt repeated later is served from the prefix cache, blocks registered by async steps
    repeat = model_engine(block_size=4, **{mode: True})
    first = results(run(repeat, stopped[:1]))
    again = run(repeat, stopped[:1])
    assert results(again) == first == {"0": expected["0"]}
    assert again["0"][-1].num_cached_tokens > 0


@pytest.mark.parametrize(("mode", "waits"), [("async_output", True), ("async_scheduling", False)])
def test_async_output_reads_step_n_before_launching_n_plus_1_and_async_scheduling_does_not(
    monkeypatch, mode, waits
):
    """The one difference between the two: where the host waits for step n's tokens. With async
    output that is before step n+1 is scheduled (the device idles while the host schedules and
    prepares); with async scheduling, only after step n+1 is launched."""
    order = []
    wait = InFlightStep.wait
    monkeypatch.setattr(InFlightStep, "wait", lambda self: order.append("wait") or wait(self))
    engine = null_engine(**{mode: True})
    execute = engine.executor.execute
    engine.executor.execute = lambda batch: order.append("launch") or execute(batch)
    engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    if waits:
        assert order == ["launch", "wait", "launch", "wait", "launch", "wait", "launch", "wait"]
    else:
        assert order == ["launch"] * 4
