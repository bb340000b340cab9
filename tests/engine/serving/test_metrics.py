import threading
import time

import httpx
from llmbench.engine.serving.metrics import LATENCY_BUCKETS_S, ServerMetrics
from prometheus_client import CollectorRegistry, Histogram, generate_latest


def exposition(registry: CollectorRegistry, name: str) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if line.startswith(name) and "_created" not in line]


def test_inter_token_histogram_matches_prometheus_observing_each_gap():
    # gaps on and beside bucket bounds, one past the last, from two requests
    requests = [[1.0, 1.001, 1.006, 1.106, 101.106], [5.0, 5.02, 5.02, 5.52]]
    metrics = ServerMetrics("tiny")
    reference_registry = CollectorRegistry()
    reference = Histogram(
        "vllm:inter_token_latency_seconds",
        "Between two outputs",
        labelnames=["model_name"],
        buckets=LATENCY_BUCKETS_S,
        registry=reference_registry,
    ).labels("tiny")
    for handed in requests:
        metrics.observe_request(handed[0] - 0.5, handed, 4, len(handed), "length", 0)
        for before, after in zip(handed[:-1], handed[1:], strict=True):
            reference.observe(after - before)
    ours = exposition(metrics.registry, "vllm:inter_token_latency_seconds")
    expected = exposition(reference_registry, "vllm:inter_token_latency_seconds")
    assert ours[:-1] == expected[:-1]  # every bucket and the count
    assert ours[-1].startswith('vllm:inter_token_latency_seconds_sum{model_name="tiny"} 100.6')
    assert 'le="+Inf",model_name="tiny"} 7.0' in "\n".join(ours)


def queue_gauges(url: str) -> tuple[float, float]:
    lines = httpx.get(url + "/metrics").text.splitlines()
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:num")
    }
    return values["vllm:num_requests_running"], values["vllm:num_requests_waiting"]


def test_the_queue_gauges_read_0_as_soon_as_every_stream_has_ended(server):
    body = {"prompt": [5, 6, 7], "max_tokens": 400, "ignore_eos": True, "stream": True}
    last_events, seen_running = [], []

    def one_stream() -> None:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as response:
            last_events.append([line for line in response.iter_lines() if line][-1])

    streams = [threading.Thread(target=one_stream) for _ in range(16)]
    for stream in streams:
        stream.start()
    while any(stream.is_alive() for stream in streams):
        seen_running.append(queue_gauges(server.url)[0])
        time.sleep(0.05)
    assert last_events == ["data: [DONE]"] * 16
    # step records reach the gauges every 0.5 s: during the load they counted the running streams...
    assert max(seen_running) > 0
    # ...and the moment the last stream has ended none is running or waiting, whatever the last record said
    assert queue_gauges(server.url) == (0, 0)
