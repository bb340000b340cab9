"""A few completions of each run, prompt and generated text (summary.json's `samples`, written when the
model has a tokenizer of its own): the reader sees that the model is real and what it was asked."""

from __future__ import annotations

from llmbench.report.format import number
from llmbench.report.html import esc, note, table
from llmbench.report.page import Page
from llmbench.results.json_file import known


def render(page: Page) -> str:
    parts = []
    for run in page.runs:
        samples = known(run.summary.samples) or []
        if not samples:
            continue
        rows = [
            [
                esc(s.request),
                _text(s.prompt),
                _text(s.completion),
                number(s.prompt_tokens),
                number(s.output_tokens),
            ]
            for s in samples
        ]
        header = ["request", "prompt", "completion", "prompt tokens", "output tokens"]
        title = f"<h3>{esc(run.label or run.name)}</h3>" if len(page.runs) > 1 else ""
        parts.append(title + table(header, rows, text_columns=(1, 2)))
    if not parts:
        return ""
    lead = note("The first timed requests of the first trial, shortened (… marks a cut).")
    return "<h2>Sample completions</h2>\n" + lead + "\n".join(parts)


def _text(value: object) -> str:
    # kept as written: line breaks and indentation are part of what the model produced
    return f'<pre style="white-space: pre-wrap; max-width: 60ch">{esc(value or "")}</pre>'
