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
        metrics.observe_request(handed[0] - 0.5, handed, 4, len(handed), "length")
        for before, after in zip(handed[:-1], handed[1:], strict=True):
            reference.observe(after - before)
    ours = exposition(metrics.registry, "vllm:inter_token_latency_seconds")
    expected = exposition(reference_registry, "vllm:inter_token_latency_seconds")
    assert ours[:-1] == expected[:-1]  # every bucket and the count
    assert ours[-1].startswith('vllm:inter_token_latency_seconds_sum{model_name="tiny"} 100.6')
    assert 'le="+Inf",model_name="tiny"} 7.0' in "\n".join(ours)
