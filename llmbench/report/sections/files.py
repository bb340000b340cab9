"""Result files that are neither runs nor studies (docs/measurements/h200: nsys profiles, the bs1 decode
bench, kernel timings, backend agreement, the overview summary), each shown as what it is: a profile as
the profile section, the rest as tables of their figures with readable names, the command that made
them first."""

from __future__ import annotations

from typing import Any

from llmbench.profiling.report_section import profile_section_html
from llmbench.report.format import number
from llmbench.report.html import esc, table
from llmbench.report.page import Page, ResultFile

MAX_ROWS = 12
TITLES = {
    "profile": "Profile",
    "decode": "Batch-1 decode",
    "kernels": "Kernel timings",
    "agreement": "Backend agreement",
    "overview": "Overview",
    "run": "Run summary",
    "other": "Result file",
}
PERCENT_WORDS = ("fraction", "agreement", "share")


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _label(key: str) -> str:
    return key.replace("_", " ")


def _cell(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and all(_scalar(v) for v in value):
        return esc(", ".join(str(v) for v in value))
    if not _scalar(value):
        return esc(str(value)[:120])
    percent = isinstance(value, float) and any(w in key for w in PERCENT_WORDS) and abs(value) <= 1
    return number(value, "%" if percent else "")


def _pivot(data: dict[str, dict[str, Any]]) -> str:
    """Dicts of figures keyed alike (a figure per mode): one row per inner key, one column per figure."""
    columns = list(data)
    rows_keys = list(next(iter(data.values())))
    rows = [[esc(r)] + [_cell(c, data[c].get(r)) for c in columns] for r in rows_keys]
    return table(["", *(esc(_label(c)) for c in columns)], rows)


def _records(key: str, rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    body = [[_cell(c, r.get(c)) for c in columns] for r in rows[:MAX_ROWS]]
    more = (
        f'<p class="note">{len(rows) - MAX_ROWS} more rows in the file.</p>' if len(rows) > MAX_ROWS else ""
    )
    summary = f"{esc(_label(key))} ({len(rows)} rows)"
    rows_html = table([esc(_label(c)) for c in columns], body, (0,))
    return f"<details><summary>{summary}</summary>{rows_html}{more}</details>"


def figures_html(data: dict[str, Any]) -> str:
    """Scalars as one table, dicts of like dicts pivoted, lists of dicts as tables, nested dicts recursed."""
    scalars = [[esc(_label(k)), _cell(k, v)] for k, v in data.items() if k != "command" and _scalar(v)]
    scalars += [
        [esc(_label(k)), _cell(k, v)] for k, v in data.items() if isinstance(v, list) and all(map(_scalar, v))
    ]
    parts = [table(["", ""], scalars, (0, 1)) if scalars else ""]
    like = {
        k: v for k, v in data.items() if isinstance(v, dict) and v and all(_scalar(x) for x in v.values())
    }
    shapes = {tuple(v) for v in like.values()}
    if len(like) > 1 and len(shapes) == 1:
        parts.append(_pivot(like))
        like = {}
    for key, value in data.items():
        if isinstance(value, dict) and (key in like or not all(_scalar(x) for x in value.values())):
            command = f"<p><code>{esc(value['command'])}</code></p>" if "command" in value else ""
            parts.append(f"<h4>{esc(_label(key))}</h4>{command}{figures_html(value)}")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            parts.append(_records(key, value))
    return "".join(parts)


def _file(file: ResultFile) -> str:
    title = f"{TITLES[file.kind]}: {file.name}"
    if file.kind == "profile":
        return f"<h3>{esc(title)}</h3>" + profile_section_html(file.data)
    command = f"<p>Made by <code>{esc(file.data['command'])}</code></p>" if file.data.get("command") else ""
    return f"<h3>{esc(title)}</h3>{command}{figures_html(file.data)}"


def render(page: Page) -> str:
    files = [f for f in page.files if f.kind != "run"]
    if not files:
        return ""
    return "<h2>Other result files</h2>\n" + "\n".join(_file(f) for f in files)
