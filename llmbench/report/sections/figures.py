"""The matplotlib figures that have no interactive counterpart on the page (per-step timeline, GPU
busy over time, MBU/MFU), embedded; every PNG is also a file beside report.html for CI artifacts."""

from __future__ import annotations

from llmbench.report.html import figure, note
from llmbench.report.page import Page


def render(page: Page) -> str:
    if not page.figures and not page.notes:
        return ""
    parts = [figure(path, caption) for path, caption in page.figures] + [note(n) for n in page.notes]
    return "<h2>Step log figures</h2>\n" + "\n".join(parts)
