"""The null executor builds every step's model inputs and sampling parameters with the model runner's
code, so its CPU figures include that host work: a step it runs without it would make them read low.
With model.null_forward_ms its forwards take that long on a simulated device, queued in order."""

import time

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.input_batch import InputBuffers
from llmbench.engine.execution.null_executor import SimulatedForwards
from llmbench.engine.execution.sampler import Sampler
from llmbench.engine.request import SamplingParams


@pytest.mark.parametrize("num_steps", [1, 4])
def test_every_null_step_prepares_the_model_inputs(monkeypatch, num_steps):
    prepared = []
    prepare = InputBuffers.prepare

    def recording_prepare(self, batch):
        inputs = prepare(self, batch)
        # the batch as it ran: the scheduler refills its entries for later steps
        facts = [(s.seq_id, s.num_computed, s.num_new, s.seq_len, s.sample) for s in batch.seqs]
        prepared.append((facts, batch.num_steps, inputs.positions.tolist(), inputs.attn.seq_lens.tolist()))
        return inputs

    monkeypatch.setattr(InputBuffers, "prepare", recording_prepare)
    sampling = []
    prepare_sampling = Sampler.prepare

    def recording_sampling(self, seqs, num_steps=1):
        sampling.append(([s.seq_id for s in seqs], num_steps))
        return prepare_sampling(self, seqs, num_steps)

    monkeypatch.setattr(Sampler, "prepare", recording_sampling)
    engine = LLMEngine(
        EngineConfig(
            model=ModelConfig(preset="tiny", executor="null"),
            num_gpu_blocks=64,
            max_num_batched_tokens=16,  # the 20-token prompt takes two chunks
            num_scheduler_steps=num_steps,
        )
    )
    prompts = [list(range(3, 23)), list(range(5, 10))]
    engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
    steps = engine.drain_step_records()
    assert len(prepared) == len(steps) > 3
    for (facts, ran, positions, seq_lens), (sampled_ids, window) in zip(prepared, sampling, strict=True):
        _, num_computed, num_new, seq_len, _ = facts[0]
        assert positions[:num_new] == list(range(num_computed, seq_len))
        assert seq_lens[: len(facts)] == [seq_len for _, _, _, seq_len, _ in facts]
        assert sampled_ids == [seq_id for seq_id, *_, sample in facts if sample] and window == ran


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_simulated_events_stand_in_the_queue_as_cuda_events_do():
    clock = FakeClock()
    device = SimulatedForwards(10.0, clock=clock, sleep=clock.sleep)
    start = device.event()
    start.record()  # the device idle: the queue's tail is now
    device.launch(2)
    end = device.event()
    end.record()  # behind the two forwards
    assert start.elapsed_time(end) == pytest.approx(20.0) and not end.query()
    end.synchronize()
    assert end.query() and clock.slept == [pytest.approx(0.02)]


def test_simulated_forwards_run_in_launch_order_and_reading_waits_for_the_end():
    clock = FakeClock()
    device = SimulatedForwards(10.0, clock=clock, sleep=clock.sleep)
    window = device.launch(3)  # a window of three forwards, launched together
    assert [round(d.at - 100.0, 6) for d in window] == [0.01, 0.02, 0.03]
    clock.now = 100.005
    queued = device.launch(1)[0]  # behind the window, not beside it
    assert round(queued.at - 100.0, 6) == 0.04
    assert not window[0].query()
    window[1].synchronize()  # sleeps until that forward's end, no longer
    assert clock.slept == [pytest.approx(0.015)] and window[0].query() and not window[2].query()
    window[0].synchronize()  # already done: no sleep
    assert len(clock.slept) == 1
    clock.now = 200.0  # the device idle meanwhile: the next forward starts at its launch
    assert round(device.launch(1)[0].at - 200.0, 6) == 0.01


def null_engine(forward_ms: float, **toggles) -> LLMEngine:
    model = ModelConfig(preset="tiny", executor="null", null_forward_ms=forward_ms)
    return LLMEngine(EngineConfig(model=model, num_gpu_blocks=64, max_num_batched_tokens=16, **toggles))


@pytest.mark.parametrize(
    "toggles",
    [
        {},
        {"async_scheduling": True},
        {"num_scheduler_steps": 4},
        {"num_scheduler_steps": 4, "async_output": True},
    ],
    ids=["sync", "async_scheduling", "streamed window", "window + async output"],
)
def test_a_forward_time_changes_no_token(toggles):
    prompts = [list(range(3, 23)), list(range(5, 10)), [7] * 9]
    params = SamplingParams(max_tokens=7, ignore_eos=True)
    expected = null_engine(0.0, **toggles).generate(prompts, params)
    assert null_engine(2.0, **toggles).generate(prompts, params) == expected


def test_a_synchronous_step_waits_for_its_forward():
    """Every overlap off: a step reads its tokens back right after launching its forward, so its
    readback wait holds the whole forward (a lower bound: sleeping never ends early)."""
    engine = null_engine(20.0)
    engine.generate([list(range(3, 13))], SamplingParams(max_tokens=4, ignore_eos=True))
    steps = engine.drain_step_records()
    assert len(steps) == 4 and all(step.sample_ms >= 19.0 for step in steps)


def test_the_step_timer_reads_the_simulated_device():
    """Each synchronous step's device span is its forwards (the device idle when it starts), from the
    start recorded just before their launch, and the window of a multi-step batch holds all of them."""
    engine = null_engine(3.0, num_scheduler_steps=2)
    engine.generate([list(range(3, 13)), [5] * 4], SamplingParams(max_tokens=5, ignore_eos=True))
    steps = engine.drain_step_records()
    assert all(3.0 * s.num_steps <= s.gpu_ms < 3.0 * s.num_steps + 1.0 for s in steps)
    assert any(s.num_steps == 2 for s in steps)
    assert all(b.gpu_start >= a.gpu_end for a, b in zip(steps, steps[1:], strict=False))


@pytest.mark.parametrize("toggles", [{}, {"num_scheduler_steps": 4}], ids=["sync", "streamed window"])
def test_the_callers_work_runs_while_the_step_is_on_the_device(toggles):
    """step(while_waiting): a benchmark client's bookkeeping runs once a step's forwards are launched
    and before their tokens are awaited, inside the device's span, never in its idle time."""
    engine = null_engine(10.0, **toggles)
    engine.add_request("r", list(range(3, 13)), SamplingParams(max_tokens=6, ignore_eos=True))
    called = []
    while engine.has_unfinished():
        engine.step(lambda: called.append(time.perf_counter()))
    spans = [(s.gpu_start, s.gpu_end) for s in engine.drain_step_records()]
    # one call a step() call (a streamed window's hand-overs too), each inside a device span
    assert len(called) >= len(spans) and all(any(a < t < b for a, b in spans) for t in called)
