"""summary.json contents of made-up runs whose metrics scale by a known slowdown, for the comparisons."""

import msgspec
import numpy as np

from llmbench.gate.load import Side
from llmbench.metrics.requests import compute_metrics
from llmbench.results.metrics import file_metrics
from llmbench.results.summary import RunSummary

PERCENTILES = [50.0, 90.0, 95.0, 99.0]


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
    data = summary_file(medians, steps)
    if len(trials) > 1:
        data["trials"] = [full_metrics(trial) for trial in trials]
    return data


def full_metrics(figures: dict) -> dict:
    """`figures` over a trial that completed 100 requests, every other key of the file null."""
    return {
        **file_metrics(msgspec.to_builtins(compute_metrics([], PERCENTILES))),
        "completed": 100,
        **figures,
    }


def summary_file(figures: dict, steps: dict | None = None) -> dict:
    """A summary.json holding `figures` among its metrics and `steps` among its steps."""
    return {
        "schema_version": 2,
        "name": "synthetic",
        "complete": True,
        "started_at": "2026-01-01T00:00:00+00:00",
        "config": {},
        "environment": {},
        "metrics": full_metrics(figures),
        "steps": {"num_steps": 0, **(steps or {})},
    }


def synthetic_run(seed: int, slowdown: float = 1.0, noise: float = 0.03, trials: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    return summary([trial_metrics(rng, slowdown, noise) for _ in range(trials)])


def side(data: dict) -> Side:
    """A summary.json's content as `llmbench compare` reads one side."""
    return Side(RunSummary.from_dict(data))
