"""The server's Prometheus metrics (GET /metrics), named after vLLM's so existing dashboards read them:
queue and KV gauges from the engine's step records, token counters, and TTFT / inter-token /
end-to-end latency as the server sees them (from a request's arrival at the server to each output
handed to the event loop), plus each step's host CPU and device milliseconds."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate

from llmbench.engine.observe.timing import StepRecord
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily

LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)
STEP_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2, 4, 6, 8, 10, 15, 20, 30, 50, 100, 250, 1000)


class ServerMetrics:
    def __init__(self, model: str):
        self.registry = CollectorRegistry()  # one per server: tests start several in one process
        labels = {"labelnames": ["model_name"], "registry": self.registry}
        self.running = Gauge("vllm:num_requests_running", "Requests in the running batch", **labels)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled", **labels)
        self.kv_blocks = Gauge("vllm:kv_cache_blocks_used", "KV cache blocks in use", **labels)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use", **labels)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of finished requests", **labels)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens", **labels)
        self.cache_queries = Counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache", **labels
        )
        self.cache_hits = Counter("vllm:prefix_cache_hits", "Prompt tokens the prefix cache held", **labels)
        self.finished = Counter(
            "vllm:request_success", "Finished requests", labelnames=["model_name", "finished_reason"],
            registry=self.registry,
        )  # fmt: skip
        buckets = {"buckets": LATENCY_BUCKETS_S, **labels}
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Arrival to first token", **buckets)
        itl = "vllm:inter_token_latency_seconds"
        self.itl = GapHistogram(itl, "Between two outputs", model, self.registry)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Arrival to last token", **buckets)
        step = {"buckets": STEP_BUCKETS_MS, **labels}
        self.step_cpu = Histogram("llmbench:step_cpu_ms", "Host milliseconds per engine step", **step)
        self.step_gpu = Histogram("llmbench:step_gpu_ms", "Device milliseconds per engine step", **step)
        self.model = model
        self.num_blocks = 1
        for gauge in (self.running, self.waiting, self.kv_blocks, self.kv_usage):
            gauge.labels(model)  # listed (at 0) from the start, not only once step records arrive
        # the queue as the last step record saw it, read at each scrape through requests_now()
        self._running, self._waiting = 0, 0
        self._in_flight: Callable[[], int] = lambda: 0
        self.running.labels(model).set_function(lambda: self.requests_now()[0])
        self.waiting.labels(model).set_function(lambda: self.requests_now()[1])

    def count_in_flight(self, in_flight: Callable[[], int]) -> None:
        """in_flight: the engine requests the server has handed over and not yet seen finish."""
        self._in_flight = in_flight

    def requests_now(self) -> tuple[int, int]:
        """(running, waiting): the last step record's, capped by the requests still in flight. Records
        arrive every 0.5 s and none after the engine goes idle, so without the cap the last record of
        a load (11 running, say) stayed on /metrics after every stream had ended."""
        in_flight = self._in_flight()
        running = min(self._running, in_flight)
        return running, min(self._waiting, in_flight - running)

    def observe_steps(self, records: list[StepRecord]) -> None:
        model = self.model
        step_cpu, step_gpu = self.step_cpu.labels(model), self.step_gpu.labels(model)
        for record in records:
            step_cpu.observe(record.schedule_ms + record.prepare_ms + record.sample_ms + record.output_ms)
            if not math.isnan(record.gpu_ms):
                step_gpu.observe(record.gpu_ms)
        last = records[-1]
        self._running, self._waiting = last.num_running, last.num_waiting
        self.kv_blocks.labels(model).set(last.num_blocks_used)
        self.kv_usage.labels(model).set(last.num_blocks_used / self.num_blocks)

    def observe_request(
        self, queued: float, handed: list[float], num_prompt: int, num_output: int, reason: str, cached: int
    ) -> None:
        """One finished request: its arrival, the times its outputs reached the event loop, and its
        prompt tokens the prefix cache held."""
        model = self.model
        self.prompt_tokens.labels(model).inc(num_prompt)
        self.cache_queries.labels(model).inc(num_prompt)
        self.cache_hits.labels(model).inc(cached)
        self.generation_tokens.labels(model).inc(num_output)
        self.finished.labels(model, reason).inc()
        if not handed:
            return
        self.ttft.labels(model).observe(handed[0] - queued)
        self.e2e.labels(model).observe(handed[-1] - queued)
        self.itl.observe_gaps(handed)


class GapHistogram:
    """A histogram of the gaps between successive times, filled a request at a time: a Histogram's
    observe() per gap (a lock per bucket and sum) cost 1.5 us of server CPU per streamed token.
    Only the event loop touches it (filling it, and /metrics reading it)."""

    def __init__(self, name: str, documentation: str, model: str, registry: CollectorRegistry):
        self.name, self.documentation, self.model = name, documentation, model
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)  # the last: past every bound (+Inf)
        self.sum = 0.0
        registry.register(self)

    def observe_gaps(self, times: list[float]) -> None:
        counts = self.counts
        for before, after in zip(times[:-1], times[1:], strict=True):
            counts[bisect_left(LATENCY_BUCKETS_S, after - before)] += 1  # le: gap <= bound
        if len(times) > 1:
            self.sum += times[-1] - times[0]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["model_name"])
        bounds = [*(str(float(b)) for b in LATENCY_BUCKETS_S), "+Inf"]
        family.add_metric([self.model], list(zip(bounds, accumulate(self.counts), strict=True)), self.sum)
        yield family
