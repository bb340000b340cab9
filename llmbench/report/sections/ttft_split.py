"""Where each request's TTFT went, from the join of the client's times with our server's own
(requests.jsonl `server_timestamps`, on the run's clock): client -> engine queue (HTTP, parsing,
tokenization, the hop to the engine core), queueing (waiting to be scheduled), prefill (scheduled to
first token sampled) and frontend/stream (sampled to the client reading it: output processing,
detokenization, the hop back, SSE). The four add up to the TTFT the client measured."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmbench.report.charts import chart, color
from llmbench.report.format import number
from llmbench.report.html import esc, note, table
from llmbench.report.page import Page
from llmbench.results.records import RequestRecord

# (name, label, start, end): the parts of TTFT in order; times are request-row keys or server keys
PARTS = (
    ("client_to_server", "client → engine queue", "submit_time", "t_queued"),
    ("queueing", "queueing", "t_queued", "t_scheduled"),
    ("prefill", "prefill", "t_scheduled", "t_first_token"),
    ("frontend_stream", "frontend / stream", "t_first_token", "first_token_time"),
)
HANDED = ("handed_to_client", "handed → client, per token")
SLOWEST = 5  # requests per run in the table of the slowest first tokens


def request_split(row: RequestRecord) -> dict[str, float] | None:
    """The TTFT parts of one request row in ms (and `handed_to_client`, the mean delay from the server
    handing a token to the frontend to the client reading it), or None without server times."""
    server = row.server_timestamps
    if not server or row.first_token_time is None:
        return None
    times = {**server, "submit_time": row.submit_time, "first_token_time": row.first_token_time}
    if any(times.get(key) is None for _, _, start, end in PARTS for key in (start, end)):
        return None
    split = {name: (times[end] - times[start]) * 1000 for name, _, start, end in PARTS}
    handed, seen = server.get("t_token_handed") or [], row.token_times
    if handed and len(handed) == len(seen):
        split["handed_to_client"] = float(np.mean(np.subtract(seen, handed))) * 1000
    return split


def joined(rows: list[RequestRecord]) -> list[tuple[RequestRecord, dict[str, float]]]:
    """(row, its split) of the succeeded timed requests that carry server times."""
    done = [r for r in rows if not r.warmup and r.finish_reason in ("stop", "length")]
    return [(r, split) for r in done if (split := request_split(r)) is not None]


def ttft_split(rows: list[RequestRecord]) -> dict[str, Any] | None:
    """{"count": requests joined, "parts": {name: mean/median/p99 ms, share of the mean TTFT}} over the
    succeeded timed requests that carry server times; None when no request does."""
    splits = [split for _, split in joined(rows)]
    if not splits:
        return None
    mean_ttft = sum(np.mean([s[name] for s in splits]) for name, *_ in PARTS)
    parts = {}
    for name in [name for name, *_ in PARTS] + ["handed_to_client"]:
        values = np.array([s[name] for s in splits if name in s])
        if not values.size:
            continue
        parts[name] = {
            "mean_ms": float(values.mean()),
            "median_ms": float(np.median(values)),
            "p99_ms": float(np.percentile(values, 99)),
        }
        if name != "handed_to_client" and mean_ttft > 0:
            parts[name]["share_of_ttft"] = float(values.mean() / mean_ttft)
    return {"count": len(splits), "parts": parts}


def render(page: Page) -> str:
    """One stacked bar of the mean TTFT's parts per run with server times, and their statistics."""
    splits = [(run.label or run.name, s) for run in page.runs if (s := ttft_split(run.requests)) is not None]
    if not splits:
        return ""
    spec = {
        "type": "bar",
        "horizontal": True,
        "stacked": True,
        "unit": "ms",
        "labels": [label for label, _ in splits],
        "datasets": [
            {
                "label": part_label,
                "data": [round(s["parts"][name]["mean_ms"], 6) for _, s in splits],
                "color": color(i),
                "stack": "ttft",
            }
            for i, (name, part_label, _, _) in enumerate(PARTS)
        ],
        "x": {"title": "mean TTFT, ms"},
        "y": {},
    }
    rows = [
        [esc(label), esc(part_label)]
        + [number(s["parts"][name].get(key)) for key in ("mean_ms", "median_ms", "p99_ms")]
        + [number(share, "%") if (share := s["parts"][name].get("share_of_ttft")) is not None else ""]
        for label, s in splits
        for name, part_label in [*((name, part_label) for name, part_label, _, _ in PARTS), HANDED]
        if name in s["parts"]
    ]
    explain = (
        "Each request's client-side TTFT split with the server's own timestamps: client → engine queue "
        "(HTTP, parsing, tokenization, the hop to the engine core), queueing, prefill (scheduled to first "
        "token sampled), frontend / stream (output processing, detokenization, the hop back, SSE, the "
        "client reading it). The parts add up to the TTFT. Handed → client: the mean delay from the server "
        "handing each token on to the client reading it. Requests joined: "
        + ", ".join(f"{label} {s['count']}" for label, s in splits)
        + "."
    )
    header = ["run", "part", "mean ms", "median ms", "p99 ms", "share of TTFT"]
    height = max(160, 90 + 30 * len(splits))
    slowest = _slowest(page)
    return "\n".join(
        [
            "<h2>TTFT split (client × server)</h2>",
            note(explain),
            chart(spec, height),
            table(header, rows, (1,)),
            "<h3>The slowest first tokens, split</h3>",
            table(["run", "request", "TTFT ms", *(esc(label) for _, label, _, _ in PARTS)], slowest, (1,)),
        ]
    )


def _slowest(page: Page) -> list[list[str]]:
    """Table rows of each run's SLOWEST requests by TTFT, with their parts: why a first token was late."""
    rows = []
    for run in page.runs:
        pairs = sorted(joined(run.requests), key=lambda p: p[0].first_token_time - p[0].submit_time)
        for row, split in pairs[::-1][:SLOWEST]:
            ttft_ms = (row.first_token_time - row.submit_time) * 1000
            rows.append(
                [esc(run.label or run.name), esc(row.id), number(ttft_ms)]
                + [number(split[name]) for name, *_ in PARTS]
            )
    return rows
