"""The report page as an ordered list of sections, each a function Page -> HTML ("" when it has
nothing to show). To add a section, write a module with a `render(page)` and add it to SECTIONS."""

from __future__ import annotations

from collections.abc import Callable

from llmbench.report.charts import scripts
from llmbench.report.html import STYLE, esc
from llmbench.report.page import Page
from llmbench.report.sections import (
    bound,
    breakdown,
    figures,
    files,
    header,
    headline,
    latency,
    models,
    runs,
    samples,
    spec_decode,
    study,
    timeline,
    ttft_split,
)

SECTIONS: tuple[Callable[[Page], str], ...] = (
    header.render,
    headline.render,
    samples.render,
    breakdown.render,
    bound.render,
    study.render,
    latency.render,
    spec_decode.render,
    models.render,
    ttft_split.render,
    timeline.render,
    files.render,
    figures.render,
    runs.render,
)


def render_html(page: Page) -> str:
    """The page: every section that has something to show, in SECTIONS order, then the chart code
    when a section drew a chart."""
    body = "\n".join(part for part in (section(page) for section in SECTIONS) if part)
    tail = scripts() if 'class="chart-spec"' in body else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(page.title)}</title><style>{STYLE}</style></head><body>\n{body}\n{tail}\n</body></html>\n"
    )
