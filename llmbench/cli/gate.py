"""The gate's commands: `compare` (two runs, a verdict per metric) and `history` (the trend of the CI
gate's records). Registered on the `llmbench` app by cli/app.py. Exit codes of both verdicts: 0 pass,
1 regression, 2 bad input, 3 can't tell (the trials could not judge the threshold)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmbench.cli.common import exit_codes, print_wide
from llmbench.cli.console import console, setup_logging


def compare(
    baseline: Annotated[Path, typer.Argument(help="Baseline run directory or summary.json")],
    current: Annotated[Path, typer.Argument(help="Current run directory or summary.json")],
    metric: Annotated[
        list[str] | None,
        typer.Option(help="Metric to check, NAME or NAME:THRESHOLD like mean_tpot_ms:10% (repeatable)"),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the verdicts to this file")
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            help="Append a Markdown table of the verdicts here (and to $GITHUB_STEP_SUMMARY when set)"
        ),
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML here, one test case per metric")] = None,
) -> None:
    """Compare two runs. Exit 0 pass, 1 a metric regressed beyond its threshold and the trial noise,
    2 bad input, 3 can't tell: the trials could not have caught twice the threshold, or a change past
    it has an interval that still reaches inside it.

    Example (the engine's CPU time per step without prefix caching, against with it):

        llmbench run configs/ci.yaml --out runs/before
        llmbench run configs/ci.yaml --out runs/after --set engine.prefix_caching=false
        llmbench compare runs/before runs/after --metric steps.mean_cpu_ms_per_step:150%
    """
    from llmbench.gate.ci_outputs import verdicts_junit, verdicts_markdown, write_markdown
    from llmbench.gate.compare import EXIT_WORDS, CompareError, compare_runs, exit_code, verdict_table

    setup_logging()
    with exit_codes((CompareError, OSError)):
        verdicts = compare_runs(baseline, current, metric, json_out)
        code = exit_code(verdicts)
        write_markdown(
            markdown,
            verdicts_markdown(f"llmbench compare: {EXIT_WORDS[code]}", verdicts, f"{baseline} -> {current}"),
        )
        if junit is not None:
            junit.write_text(verdicts_junit("llmbench compare", verdicts))
    print_wide(verdict_table(verdicts))
    if code == 3:
        console.print("compare: can't tell at these thresholds from these trials (exit 3)", highlight=False)
    raise typer.Exit(code)


def history(
    file: Annotated[
        Path, typer.Argument(help="The gate's history, a JSONL file (scripts/perf_gate.sh --history)")
    ],
    metric: Annotated[
        str | None, typer.Option(help="Metric to chart (default: the only one in the file)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Directory for history.html and history.png")] = None,
    min_change: Annotated[
        float, typer.Option(help="Smallest step, as a fraction of the level, to mark as a change point")
    ] = 0.01,
) -> None:
    """Chart a metric over the gate's records, with the change points where it stepped and stayed.

    Example (scripts/perf_gate.sh --history FILE appends one record a gate):

        llmbench history docs/measurements/cpu/perf_gate_history.jsonl --out runs/gate-history
    """
    from llmbench.gate.compare import format_value
    from llmbench.gate.history import HistoryError, load_history
    from llmbench.gate.history_chart import render_history

    setup_logging()
    with exit_codes((HistoryError, OSError)):
        if not 0 < min_change < 1:
            raise HistoryError(f"--min-change {min_change:g}: a fraction between 0 and 1, like 0.01")
        records = load_history(file)
        page, png, series, points = render_history(records, out or file.with_suffix(""), metric, min_change)
    for point in points:
        console.print(
            f"change point at {series[point.index].commit[:12]}: {format_value(point.before)} -> "
            f"{format_value(point.after)} "
            f"({point.change:+.2%})",
            highlight=False,
        )
    console.print(f"history: {page}\nchart: {png}", highlight=False)
