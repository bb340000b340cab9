"""GPU step timing: CUDA events resolved only once they have fired, converted to host time through
one anchor, the start recorded after input preparation, records drained without waiting. The event
logic runs here on fake events driven by a fake device clock, in the real engine on the tiny model."""

import math

import pytest
from llmbench.engine.observe.timing import RESOLVE_EVERY, GpuTimer, StepRecord
from llmbench.engine.request import SamplingParams

from tests.engine.fake_device import (
    FORWARD_MS,
    PREPARE_MS,
    FakeDevice,
    FakeEvent,
    make_timer,
    timed_model_engine,
)
from tests.engine.helpers import null_engine, run, workload


def record(step: int) -> StepRecord:
    return StepRecord(step, 0.0, 0.0, 0, 0, 0, 0, 0, 0, 1, 0.0, 0.0, 0.0, 0.0)


def timed_step(timer: GpuTimer, device: FakeDevice, start_ms: float, end_ms: float, step: int) -> StepRecord:
    device.now_ms = start_ms
    span = timer.span()
    span.record_start()
    device.now_ms = end_ms
    timer.stop(span)
    rec = record(step)
    timer.track(span, rec)
    return rec


def test_events_resolve_once_fired_in_host_time():
    timer, device = make_timer()
    assert device.syncs == 1  # the anchor, once
    first = timed_step(timer, device, 6.0, 9.5, 0)
    timer.resolve()
    assert math.isnan(first.gpu_ms)  # not fired yet: resolving never waits
    device.fired_until = 9.5
    second = timed_step(timer, device, 10.0, 12.0, 1)
    assert math.isnan(first.gpu_ms)  # tracking reads nothing before RESOLVE_EVERY steps wait
    timer.resolve()
    assert first.gpu_ms == 3.5 and math.isnan(second.gpu_ms)
    assert first.gpu_start == 100.0 + 0.001 and first.gpu_end == 100.0 + 0.0045
    assert device.syncs == 1
    timer.resolve(wait=True)  # e.g. at drain_step_records
    assert second.gpu_ms == 2.0 and second.gpu_start == 100.005
    assert device.syncs == 2


def test_a_steady_run_asks_about_one_event_every_resolve_every_steps():
    """Steps whose events fire before the next is launched (a synchronous engine): their times are
    read every RESOLVE_EVERY steps, with two queries a pass (the step just tracked has not fired
    yet, the one before it has) and no synchronization."""
    timer, device = make_timer(ring_size=2 * RESOLVE_EVERY)
    calls = device.calls
    records = []
    for step in range(2 * RESOLVE_EVERY):
        records.append(timed_step(timer, device, 10.0 * step, 10.0 * step + 4, step))
        device.fired_until = 10.0 * step + 4
        if step == RESOLVE_EVERY - 2:
            assert all(math.isnan(r.gpu_ms) for r in records)
    assert device.calls - calls == 4 and device.syncs == 1
    # each pass left the step just tracked for the next; the last two wait for the next pass or a drain
    assert [r.gpu_ms for r in records[:-2]] == [4.0] * (len(records) - 2)
    assert all(math.isnan(r.gpu_ms) for r in records[-2:])


def test_spans_still_in_flight_wait_for_a_later_pass():
    """Overlapped steps: the newest spans have not fired when their pass comes; the ones before them
    are read, in order, and the rest at the next pass."""
    timer, device = make_timer(ring_size=2 * RESOLVE_EVERY)
    records = [timed_step(timer, device, 10.0 * i, 10.0 * i + 4, i) for i in range(RESOLVE_EVERY - 1)]
    device.fired_until = 10.0 * (RESOLVE_EVERY - 3) + 4  # the last two still running
    calls = device.calls
    records.append(timed_step(timer, device, 500.0, 504.0, RESOLVE_EVERY - 1))
    assert device.calls - calls == 3  # the two unfired asked about from the newest back, then one fired
    assert [math.isnan(r.gpu_ms) for r in records] == [False] * (RESOLVE_EVERY - 2) + [True] * 2
    assert timer.oldest_unresolved() is records[-2]


def test_resolution_keeps_order_and_a_full_ring_waits_for_the_oldest():
    timer, device = make_timer(ring_size=3)
    records = [timed_step(timer, device, 10.0 * i, 10.0 * i + 4, i) for i in range(3)]
    device.fired_until = 24.0  # the third has fired, the first two too
    timer.resolve()
    assert [r.gpu_ms for r in records] == [4.0, 4.0, 4.0]
    more = [timed_step(timer, device, 10.0 * i, 10.0 * i + 4, i) for i in range(3, 6)]
    assert all(math.isnan(r.gpu_ms) for r in more)
    # a fourth outstanding step: the ring is empty, so the oldest is waited for and its span reused
    extra = timed_step(timer, device, 60.0, 61.0, 6)
    assert more[0].gpu_ms == 4.0 and math.isnan(more[1].gpu_ms) and math.isnan(extra.gpu_ms)
    timer.resolve(wait=True)
    assert [r.gpu_ms for r in more[1:] + [extra]] == [4.0, 4.0, 1.0]
    assert more[2].gpu_end == 100.0 + (54.0 - 5.0) / 1e3


def test_cpu_steps_have_no_gpu_times_and_phases_within_the_step():
    engine = null_engine(num_scheduler_steps=4, async_output=True)
    run(engine, workload())
    records = engine.drain_step_records()
    assert records and all(math.isnan(r.gpu_ms + r.gpu_start + r.gpu_end) for r in records)
    assert {r.num_steps for r in records} == {1, 4}
    for r in records:
        phases = r.schedule_ms + r.prepare_ms + r.sample_ms + r.output_ms
        assert 0 < phases <= (r.t_end - r.t_start) * 1e3 + 1e-6


def test_step_timing_off_records_nothing():
    engine = null_engine(step_timing=False, async_output=True)
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=5))
    assert engine.drain_step_records() == []


@pytest.mark.parametrize("num_scheduler_steps", [1, 4])
def test_gpu_span_starts_after_input_preparation(num_scheduler_steps):
    """A synchronous step's host preparation is idle device time: the span holds the forwards alone."""
    engine, device = timed_model_engine(num_scheduler_steps=num_scheduler_steps)
    run(engine, workload())
    records = engine.drain_step_records()  # idle: waits for the last events
    assert records and {r.num_steps for r in records} >= {num_scheduler_steps}
    assert [r.gpu_ms for r in records] == [FORWARD_MS * r.num_steps for r in records]
    for before, after in zip(records, records[1:], strict=False):
        assert after.gpu_start - before.gpu_end == pytest.approx(PREPARE_MS / 1e3)


def test_drain_returns_fired_records_and_keeps_the_rest():
    engine, device = timed_model_engine(async_output=True)
    for k, (prompt, params) in enumerate(workload()):
        engine.add_request(str(k), prompt, params)
    for _ in range(6):
        engine.step()
    device.fired_until = 5.0 + 3 * (PREPARE_MS + FORWARD_MS)  # the anchor at 5 ms, then three steps
    first = engine.drain_step_records()
    assert [r.step for r in first] == [0, 1, 2]
    assert all(r.gpu_ms == FORWARD_MS for r in first)
    assert device.syncs == 1  # the anchor alone: draining a busy engine never waits
    assert engine.drain_step_records() == []  # nothing more has fired
    device.fired_until = device.now_ms
    second = engine.drain_step_records()
    assert [r.step for r in second] == [3, 4, 5] and all(r.gpu_ms == FORWARD_MS for r in second)
    while engine.has_unfinished():
        engine.step()
    assert device.syncs == 1
    last = engine.drain_step_records()  # the end of the run: the wait is allowed there
    assert [r.step for r in last] == list(range(6, 6 + len(last))) and len(last) > 0
    launched = [r.num_prefill_tokens + r.num_decode_seqs > 0 for r in last]
    assert [not math.isnan(r.gpu_ms) for r in last] == launched


def test_a_host_preempted_while_anchoring_shifts_no_gpu_time():
    """The anchor pairs an event with the host time it fired at. A host thread preempted between
    recording it and reading the clock (0.5 s here) must not move every step's GPU times by as much:
    the anchor takes the narrowest of a few windows. Device and host clocks agree (ms = offset + s)."""
    device = FakeDevice()
    reads = iter([100.0, 100.5, 100.6, 100.600002, 100.7, 100.700004])  # (before, after) per try

    def host_clock() -> float:
        now = next(reads)
        device.now_ms = (now - 100.0) * 1e3 + 5.0
        device.fired_until = device.now_ms  # an idle device: what is recorded fires at once
        return now

    timer = GpuTimer(4, new_event=lambda: FakeEvent(device), clock=host_clock)
    step = timed_step(timer, device, start_ms=(100.9 - 100.0) * 1e3 + 5.0, end_ms=915.0, step=0)
    device.fired_until = 915.0
    timer.resolve()
    assert step.gpu_start == pytest.approx(100.9, abs=1e-5)  # one window alone: 101.15
    assert step.gpu_ms == pytest.approx(10.0)
