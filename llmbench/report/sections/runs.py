"""Per run directory: its profile (profile.json), the failed and slowest requests, and the resolved
config and environment, folded away below the figures."""

from __future__ import annotations

import math

import msgspec
import yaml

from llmbench.profiling.profile_file import load_profile
from llmbench.profiling.report_section import profile_section_html
from llmbench.report.format import number
from llmbench.report.html import esc, table
from llmbench.report.load import RunData
from llmbench.report.page import Page
from llmbench.results.json_file import known
from llmbench.results.records import RequestRecord

SLOWEST_SHOWN = 10
PROMPT_CHARS = 200


def _e2el_ms(row: RequestRecord) -> float:
    times = row.token_times
    return (times[-1] - row.submit_time) * 1000 if times else math.inf


def slowest_requests(run: RunData) -> str:
    failed, answered = [], []
    for r in run.requests:
        (failed if r.error or not r.token_times else answered).append(r)
    slowest = sorted(answered, key=_e2el_ms, reverse=True)[:SLOWEST_SHOWN]
    if not failed and not slowest:
        return ""
    has_prompt = any(r.prompt is not None for r in failed + slowest)
    header = ["id", "trial", "prompt tokens", "output tokens", "E2EL (ms)", "finish", "error"]
    rows = []
    for r in failed + slowest:
        row = [esc(r.id)] + [number(n) for n in (r.trial, r.prompt_len, r.output_len)]
        row += [number(_e2el_ms(r)) if r.token_times else ""]  # a failed request has no E2EL
        row += [esc(r.finish_reason or ""), esc(r.error or "")]
        if has_prompt:
            row.append(esc((r.prompt or "")[:PROMPT_CHARS]))
        rows.append(row)
    title = f"Failed and slowest requests ({len(failed)} failed, {len(slowest)} slowest by E2EL)"
    return f"<h3>{esc(title)}</h3>" + table(header + (["prompt"] if has_prompt else []), rows, (0, 5, 6, 7))


def _details(run: RunData) -> str:
    config = yaml.safe_dump(run.summary.config, sort_keys=False)
    env = yaml.safe_dump(msgspec.to_builtins(run.summary.environment), sort_keys=False)
    where = f"run directory: {run.path}\nstarted at: {known(run.summary.started_at) or 'n/a'}\n"
    return (
        f"<details><summary>Resolved config</summary><pre>{esc(config)}</pre></details>"
        f"<details><summary>Environment</summary><pre>{esc(where + env)}</pre></details>"
    )


def render(page: Page) -> str:
    parts = []
    for run in page.runs:
        parts.append(f"<h2>Run {esc(run.label)}</h2>")
        profile = load_profile(run.path)
        if profile is not None:
            parts.append(profile_section_html(profile))
        parts += [slowest_requests(run), _details(run)]
    return "\n".join(p for p in parts if p)
