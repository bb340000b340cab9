"""Speculative decoding as the server counted it (summary.json's server_metrics, from its /metrics): the
drafts, how many proposed tokens were accepted, and the mean accepted length, over the timed trials and
in each. Shown only for runs whose server decoded speculatively."""

from __future__ import annotations

from typing import Any

from llmbench.report.format import number
from llmbench.report.html import esc, note, table
from llmbench.report.page import Page
from llmbench.report.sections.header import sources
from llmbench.results.json_file import known

HEADER = ["", "drafts", "proposed tokens", "accepted tokens", "acceptance rate", "mean accepted length"]


def _row(label: str, counts: list[str], rate: Any, length: Any) -> list[str]:
    return [esc(label), *counts, number(rate, "%"), number(length)]


def render(page: Page) -> str:
    rows = []
    for label, summary in sources(page):
        server = known(summary.server_metrics)
        if server is None or known(server.spec_drafts) is None:
            continue
        counts = [
            number(known(n))
            for n in (server.spec_drafts, server.spec_draft_tokens, server.spec_accepted_tokens)
        ]
        rows.append(
            _row(label, counts, known(server.spec_acceptance_rate), known(server.spec_mean_accepted_length))
        )
        trials = list(
            zip(
                known(server.spec_drafts_by_trial) or [],
                known(server.spec_acceptance_rate_by_trial) or [],
                known(server.spec_mean_accepted_length_by_trial) or [],
                strict=True,
            )
        )
        if len(trials) > 1:  # summary.json keeps each trial's drafts and ratios, not its tokens
            rows += [
                _row(f"  trial {k + 1}", [number(d), "", ""], r, n) for k, (d, r, n) in enumerate(trials)
            ]
    if not rows:
        return ""
    lead = note(
        "The server's own counts over the timed trials: a draft is one request's proposal at one step "
        "(SGLang: its verify pass); acceptance rate = accepted / proposed tokens; mean accepted length = "
        "1 + accepted / drafts, the token the target model adds included (vLLM's definition). Accepted "
        "tokens reach the client in one chunk, one ITL arrival: ITL ≈ TPOT × mean accepted length."
    )
    return "<h2>Speculative decoding</h2>\n" + lead + table(HEADER, rows)
