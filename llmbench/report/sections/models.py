"""A mix of served models (backend.models): each model's share, counts, throughput and latency, from
summary.json's `models`, beside the run's overall figures."""

from __future__ import annotations

from llmbench.report.format import number
from llmbench.report.html import esc, table
from llmbench.report.page import Page
from llmbench.results.json_file import known
from llmbench.results.metrics import Metrics

# (metrics key, heading): a model's figures as the headline shows the whole run's
COLUMNS = (
    ("completed", "completed"),
    ("failed", "failed"),
    ("request_throughput", "req/s"),
    ("output_throughput", "output tok/s"),
    ("mean_ttft_ms", "mean TTFT (ms)"),
    ("p99_ttft_ms", "p99 TTFT (ms)"),
    ("mean_tpot_ms", "mean TPOT (ms)"),
    ("mean_itl_ms", "mean ITL (ms)"),
    ("mean_e2el_ms", "mean E2EL (ms)"),
)


def _run_table(models: dict[str, Metrics], weights: dict[str, float]) -> str:
    total = sum(weights.values()) or 1.0
    rows = [
        [esc(name), number(weights[name] / total if name in weights else None, "%")]
        + [number(metrics.value(key)) for key, _ in COLUMNS]
        for name, metrics in models.items()
    ]
    return table(["model", "weight", *(esc(h) for _, h in COLUMNS)], rows, text_columns=(0,))


def render(page: Page) -> str:
    parts = []
    for run in page.runs:
        models = known(run.summary.models)
        if not models:
            continue
        config = (run.summary.config or {}).get("backend") or {}
        weights = {m["name"]: m["weight"] for m in config.get("models") or ()}
        if len(page.runs) > 1:
            parts.append(f"<h3>{esc(run.label)}</h3>")
        parts.append(_run_table(models, weights))
    if not parts:
        return ""
    return "<h2>Per model</h2>\n" + "\n".join(parts)
