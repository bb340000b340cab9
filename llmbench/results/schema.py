"""The JSON Schema of each result file with a declared type (`llmbench schema NAME`), as the file has
it: a metrics object's latency statistics and its `p<P>_<latency>_ms` keys sit flat beside its counts,
not in the `latencies` the type keeps them in."""

from __future__ import annotations

from typing import Any

import msgspec

from llmbench.results.ablation import Ablation
from llmbench.results.calibrate import Calibrate
from llmbench.results.capacity import Capacity
from llmbench.results.metrics import PERCENTILE_PATTERN
from llmbench.results.summary import RunSummary
from llmbench.results.sweep import Sweep

TYPES = {
    "summary": RunSummary,
    "ablation": Ablation,
    "sweep": Sweep,
    "capacity": Capacity,
    "calibrate": Calibrate,
}
NO_METRICS = {"type": "object", "maxProperties": 0}  # a run that finished no trial has `{}` for its metrics


def json_schema(name: str) -> dict[str, Any]:
    schema = msgspec.json.schema(TYPES[name])
    defs = schema["$defs"]
    if "Latencies" in defs:
        latencies = defs.pop("Latencies")
        flat = {key: value for key, value in latencies["properties"].items() if key != "percentiles"}
        for holder in ("Metrics", "TurnMetrics"):
            if holder in defs:
                _flatten(defs[holder], flat)
    for definition in defs.values():
        metrics = definition.get("properties", {}).get("metrics", {})
        if {"type": "null"} in metrics.get("anyOf", []):
            metrics["anyOf"] = [NO_METRICS if part == {"type": "null"} else part for part in metrics["anyOf"]]
    return schema


def _flatten(holder: dict[str, Any], flat: dict[str, Any]) -> None:
    items = list(holder["properties"].items())
    at = [key for key, _ in items].index("latencies")
    items[at : at + 1] = flat.items()
    holder["properties"] = dict(items)
    holder["required"] = [key for key in holder["required"] if key != "latencies"]
    holder["patternProperties"] = {PERCENTILE_PATTERN: {"anyOf": [{"type": "number"}, {"type": "null"}]}}
