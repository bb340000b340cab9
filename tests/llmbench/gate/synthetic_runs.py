"""summary.json contents of made-up runs whose metrics scale by a known slowdown, for the comparisons."""

import numpy as np


def trial_metrics(rng: np.random.Generator, slowdown: float, noise: float) -> dict:
    """One trial of a run whose every step takes `slowdown` times as long, with relative noise."""
    jitter = lambda: 1 + rng.normal(0, noise)
    return {
        "output_throughput": 1000 / slowdown * jitter(),
        "request_throughput": 10 / slowdown * jitter(),
        "mean_ttft_ms": 50 * slowdown * jitter(),
        "p99_ttft_ms": 120 * slowdown * jitter(),
        "mean_tpot_ms": 8 * slowdown * jitter(),
        "mean_itl_ms": 8 * slowdown * jitter(),
    }


def summary(trials: list[dict], steps: dict | None = None) -> dict:
    medians = {key: float(np.median([t[key] for t in trials])) for key in trials[0]}
    return {
        "schema_version": 1,
        "name": "synthetic",
        "complete": True,
        "metrics": medians,
        "steps": steps or {},
        "trials": trials if len(trials) > 1 else None,
    }


def synthetic_run(seed: int, slowdown: float = 1.0, noise: float = 0.03, trials: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    return summary([trial_metrics(rng, slowdown, noise) for _ in range(trials)])
