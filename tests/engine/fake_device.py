"""A fake CUDA device for the engine's GPU step timer: events that fire once the device clock passes
the time they were recorded at, and the tiny model's engine timed on it, its input preparation and
each forward moving that clock, so GPU spans are known to the millisecond on the CPU."""

from __future__ import annotations

from llmbench.engine.observe.timing import GpuTimer

from tests.engine.helpers import model_engine


class FakeDevice:
    """A device clock in ms, and a stream: events fire when the clock passes their time."""

    def __init__(self):
        self.now_ms = 0.0
        self.fired_until = -1.0
        self.syncs = 0  # waits that blocked the host
        self.calls = 0  # queries and synchronizations, each a CUDA call of host time


class FakeEvent:
    def __init__(self, device: FakeDevice):
        self.device = device
        self.time_ms: float | None = None

    def record(self, stream=None) -> None:
        self.time_ms = self.device.now_ms

    def query(self) -> bool:
        self.device.calls += 1
        return self.time_ms is not None and self.time_ms <= self.device.fired_until

    def synchronize(self) -> None:
        self.device.calls += 1
        if not self.time_ms <= self.device.fired_until:
            self.device.syncs += 1  # the host had to wait
            self.device.fired_until = self.time_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.time_ms - self.time_ms


def make_timer(ring_size: int = 4) -> tuple[GpuTimer, FakeDevice]:
    device = FakeDevice()
    device.now_ms = 5.0  # the anchor is recorded at device time 5 ms, host time 100 s
    timer = GpuTimer(ring_size, new_event=lambda: FakeEvent(device), clock=lambda: 100.0)
    return timer, device


PREPARE_MS, FORWARD_MS = 5.0, 2.0


def timed_model_engine(**overrides):
    """The tiny model on the CPU with the GPU timer of a CUDA engine on fake events. Host input
    preparation moves the fake device clock by PREPARE_MS while the device idles, each forward's
    logits by FORWARD_MS of device work."""
    # bursty windows: on the CPU a streamed window runs its later forwards as they are handed over,
    # after the span has closed, where a GPU has them all launched inside it
    overrides.setdefault("stream_multi_step", False)
    engine = model_engine(**overrides)
    timer, device = make_timer(ring_size=64)
    engine.step_log.gpu_timer = timer
    runner = engine.executor
    prepare, compute_logits = runner.inputs.prepare, runner.model.compute_logits

    def slow_prepare(batch):
        device.now_ms += PREPARE_MS
        return prepare(batch)

    def slow_logits(hidden):
        device.now_ms += FORWARD_MS
        return compute_logits(hidden)

    runner.inputs.prepare = slow_prepare
    runner.model.compute_logits = slow_logits
    return engine, device
