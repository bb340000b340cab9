"""The building blocks of report.html's sections: escaping, tables, notes, embedded PNGs and the page
style. Every string that came from the user (config names, prompts, errors, config values) goes
through esc (html.escape)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from llmbench.report.format import describe, header_cell, number

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1180px; padding: 0 1em; }
body { color: #222; }
h1 { margin-bottom: 0.1em; font-size: 1.6em; }
h2 { border-bottom: 2px solid #0072B2; padding-bottom: 0.2em; margin-top: 1.8em; }
h3 { margin-bottom: 0.3em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
th { background: #f3f5f8; font-weight: 600; }
th span[title], .card .label[title] { text-decoration: underline dotted #999; cursor: help; }
.wide { overflow-x: auto; max-width: 100%; }
.header-table td { text-align: left; } .header-table td:first-child { color: #555; white-space: nowrap; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(165px, 1fr)); gap: 0.6em; }
.card { border: 1px solid #dde3ea; border-radius: 6px; padding: 0.5em 0.7em; background: #fafcff; }
.card .value { font-size: 1.45em; font-weight: 600; } .card .unit { color: #555; font-size: 0.85em; }
.card .label { color: #444; font-size: 0.85em; } .card .def { color: #777; font-size: 0.75em; }
.incomplete { color: #fff; background: #c0392b; padding: 0.1em 0.5em; border-radius: 3px; font-weight: bold; }
.note { color: #555; font-style: italic; }
.chart { position: relative; width: 100%; margin: 0.6em 0 1.2em; }
.charts2 { display: grid; grid-template-columns: 1fr 1fr; gap: 0 1.2em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def table(header: list[str], rows: list[list[str]], text_columns: tuple[int, ...] = (), css: str = "") -> str:
    """`header` and `rows` hold already-escaped HTML fragments; wide tables scroll inside the page."""
    head = "".join(
        f'<th class="text">{h}</th>' if i in text_columns else f"<th>{h}</th>" for i, h in enumerate(header)
    )
    thead = f"<thead><tr>{head}</tr></thead>" if any(header) else ""  # a key-value table needs no heading

    def cell(i: int, content: str) -> str:
        return f'<td class="text">{content}</td>' if i in text_columns else f"<td>{content}</td>"

    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    attr = f' class="{css}"' if css else ""
    return f'<div class="wide"><table{attr}>{thead}<tbody>{body}</tbody></table></div>'


def metric_table(keys: list[str], columns: list[tuple[str, dict[str, Any]]]) -> str:
    """Rows of figures (friendly label with unit, definition on hover), one column per source."""
    rows = [
        [header_cell(k)] + [number(values.get(k), describe(k).unit) for _, values in columns] for k in keys
    ]
    return table(["", *(esc(name) for name, _ in columns)], rows)


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def figure(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )
