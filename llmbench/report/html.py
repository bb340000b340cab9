"""One self-contained report.html: inline CSS, images as base64 data URIs, no scripts and no
external references, so it opens anywhere (CI artifacts, mail attachments, offline). Every string
that came from the user (config names, prompts, errors, config values) goes through html.escape."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import yaml

from llmbench.profiling.profile_file import load_profile
from llmbench.profiling.report_section import profile_section_html
from llmbench.report.load import RunData

HEADLINE = (
    ("completed", "completed requests", "{:,.0f}"),
    ("failed", "failed requests", "{:,.0f}"),
    ("duration_s", "duration (s)", "{:.2f}"),
    ("request_throughput", "requests/s", "{:.2f}"),
    ("output_throughput", "output tokens/s", "{:,.1f}"),
    ("total_token_throughput", "total tokens/s", "{:,.1f}"),
    ("request_goodput", "goodput (requests/s)", "{:.2f}"),
    ("mean_ttft_ms", "mean TTFT (ms)", "{:.2f}"),
    ("median_ttft_ms", "median TTFT (ms)", "{:.2f}"),
    ("p99_ttft_ms", "p99 TTFT (ms)", "{:.2f}"),
    ("mean_tpot_ms", "mean TPOT (ms)", "{:.2f}"),
    ("p99_tpot_ms", "p99 TPOT (ms)", "{:.2f}"),
    ("mean_itl_ms", "mean ITL (ms)", "{:.2f}"),
    ("p99_itl_ms", "p99 ITL (ms)", "{:.2f}"),
    ("mean_e2el_ms", "mean E2EL (ms)", "{:.2f}"),
    ("p99_e2el_ms", "p99 E2EL (ms)", "{:.2f}"),
)
SLOWEST_SHOWN = 10
PROMPT_CHARS = 200

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.7em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.text { text-align: left; }
th { background: #f3f3f3; }
.incomplete { color: #fff; background: #c0392b; padding: 0.1em 0.5em; border-radius: 3px; font-weight: bold; }
.note { color: #555; font-style: italic; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any, fmt: str = "{:.4g}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return esc(value)
    return esc(fmt.format(value))


def _table(header: list[str], rows: list[list[str]], text_columns: tuple[int, ...] = ()) -> str:
    """`header` and `rows` hold already-escaped HTML fragments."""
    head = "".join(f"<th>{h}</th>" for h in header)

    def cell(i: int, content: str) -> str:
        return f'<td class="text">{content}</td>' if i in text_columns else f"<td>{content}</td>"

    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _run_header(run: RunData) -> str:
    status = "complete" if run.complete else '<span class="incomplete">INCOMPLETE</span>'
    return f"{esc(run.label)}<br>{status}"


def _summary_table(runs: list[RunData]) -> str:
    rows = [[esc(label)] + [_number(run.metrics.get(k), fmt) for run in runs] for k, label, fmt in HEADLINE]
    steps = [run.summary.get("steps") or {} for run in runs]
    for key in dict.fromkeys(k for s in steps for k in s):
        rows.append([esc(f"steps: {key}")] + [_number(s.get(key)) for s in steps])
    return _table(["metric"] + [_run_header(run) for run in runs], rows)


def _environment_table(runs: list[RunData]) -> str:
    environments = [run.summary.get("environment") or {} for run in runs]
    keys = list(dict.fromkeys(k for env in environments for k in env))
    if not keys:
        return '<p class="note">No environment recorded.</p>'
    rows = [[esc(key)] + [esc(env.get(key, "-")) for env in environments] for key in keys]
    rows.insert(0, ["started at"] + [esc(run.summary.get("started_at", "-")) for run in runs])
    rows.insert(1, ["run directory"] + [esc(run.path) for run in runs])
    return _table(["", *[esc(run.label) for run in runs]], rows, text_columns=tuple(range(len(runs) + 1)))


def _slowest_requests(run: RunData) -> str:
    def e2el_ms(row: dict) -> float:
        times = row.get("token_times") or []
        return (times[-1] - row["submit_time"]) * 1000 if times else math.inf

    failed, answered = [], []
    for r in run.requests:
        (failed if r.get("error") or not r.get("token_times") else answered).append(r)
    slowest = sorted(answered, key=e2el_ms, reverse=True)[:SLOWEST_SHOWN]
    if not failed and not slowest:
        return '<p class="note">No requests recorded.</p>'
    has_prompt = any("prompt" in r for r in failed + slowest)
    header = ["id", "trial", "prompt tokens", "output tokens", "E2EL (ms)", "finish", "error"]
    rows = []
    for r in failed + slowest:
        row = [esc(r.get("id"))] + [_number(r.get(k)) for k in ("trial", "prompt_len", "output_len")]
        row += [_number(e2el_ms(r) if r.get("token_times") else None, "{:.1f}")]
        row += [esc(r.get("finish_reason") or "-"), esc(r.get("error") or "")]
        if has_prompt:
            row.append(esc(str(r.get("prompt", ""))[:PROMPT_CHARS]))
        rows.append(row)
    text_columns = (0, 5, 6, 7)
    return _table(header + (["prompt"] if has_prompt else []), rows, text_columns)


def _ablation_table(run: RunData) -> str:
    metric_keys = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
    step_keys = list(dict.fromkeys(k for v in run.ablation["variants"] for k in (v.get("steps") or {})))
    rows = [
        [esc(v.get("name"))]
        + [_number((v.get("metrics") or {}).get(k)) for k in metric_keys]
        + [_number((v.get("steps") or {}).get(k)) for k in step_keys]
        for v in run.ablation["variants"]
    ]
    order = ", ".join(esc(o) for o in run.ablation.get("order") or [])
    header = ["variant", *metric_keys, *(f"steps: {k}" for k in step_keys)]
    return f"<p>Order: {order}</p>" + _table(header, rows)


def _sweep_table(run: RunData) -> str:
    keys = ("request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms")
    rows = [
        [esc(p.get("label"))] + [_number((p.get("metrics") or {}).get(k)) for k in keys]
        for p in run.sweep["points"]
    ]
    return _table(["offered req/s", *keys], rows)


def _figure(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def render_html(runs: list[RunData], figures: list[tuple[Path, str]], notes: list[str]) -> str:
    """The report page: summary and environment tables, figures, notes on what could not be drawn,
    each run's ablation or rate sweep, slowest and failed requests, and resolved config."""
    title = "llmbench report: " + ", ".join(run.label for run in runs)
    parts = [
        f"<h1>{esc(title)}</h1>",
        "<h2>Summary</h2>",
        _summary_table(runs),
        "<h2>Environment</h2>",
        _environment_table(runs),
        "<h2>Figures</h2>",
        *(_figure(path, caption) for path, caption in figures),
        *(f'<p class="note">{esc(note)}</p>' for note in notes),
    ]
    for run in runs:
        parts.append(f"<h2>Run {esc(run.label)}</h2>")
        if not run.complete:
            parts.append(
                '<p class="note">This run did not finish: metrics are recomputed from the requests '
                "that completed before it stopped.</p>"
            )
        if run.ablation and run.ablation.get("variants"):
            parts += ["<h3>Ablation</h3>", _ablation_table(run)]
        if run.sweep and run.sweep.get("points"):
            parts += ["<h3>Rate sweep</h3>", _sweep_table(run)]
        profile = load_profile(run.path)
        if profile is not None:
            parts.append(profile_section_html(profile))
        parts += ["<h3>Failed and slowest requests</h3>", _slowest_requests(run)]
        config = yaml.safe_dump(run.summary.get("config") or {}, sort_keys=False)
        parts.append(f"<details><summary>Resolved config</summary><pre>{esc(config)}</pre></details>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
