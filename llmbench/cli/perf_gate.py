"""The CI regression gate's command, `python3 -m llmbench.cli.perf_gate BASELINE CURRENT WORK`, which
scripts/perf_gate.sh runs: it parses the arguments, has gate/perf_gate.py measure and judge, prints the
verdict and writes what was asked for (verdicts JSON, history record, Markdown, JUnit XML). Exit codes:
0 pass; 1 a regression (or a side that completed nothing); 2 a side that could not be measured, or bad
input; 3 can't tell (the noise leaves the threshold unresolved)."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmbench.cli.common import print_wide
from llmbench.cli.console import console, setup_logging
from llmbench.gate.ci_outputs import verdicts_junit, verdicts_markdown, write_markdown
from llmbench.gate.compare import (
    EXIT_WORDS,
    INCONCLUSIVE,
    CompareError,
    Verdict,
    exit_code,
    verdict_table,
    write_verdicts,
)
from llmbench.gate.history import append_record
from llmbench.gate.instructions import CountError
from llmbench.gate.perf_gate import MODES, history_record, run_gate
from llmbench.gate.wall_gate import GateError


def main() -> None:
    parser = argparse.ArgumentParser(description="The regression gate's measurement and verdict.")
    parser.add_argument("baseline", type=Path, help="tree whose code is the baseline")
    parser.add_argument("current", type=Path, help="tree whose code is judged")
    parser.add_argument("work", type=Path, help="directory for the runs")
    parser.add_argument("--mode", choices=sorted(MODES), default="instructions")
    parser.add_argument("--config", default="configs/ci.yaml", help="each tree's own config at this path")
    parser.add_argument("--pairs", type=int, default=20, help="wall mode: interleaved pairs a round")
    parser.add_argument(
        "--threshold", help="slowdown that fails (default 2%% for instructions, 10%% for wall)"
    )
    parser.add_argument("--json", type=Path, help="write the verdicts here")
    parser.add_argument("--history", type=Path, help="append this gate's record to this JSONL file")
    parser.add_argument(
        "--markdown", type=Path, help="append a Markdown summary here (and to $GITHUB_STEP_SUMMARY)"
    )
    parser.add_argument("--junit", type=Path, help="write JUnit XML here, one test case per metric")
    parser.add_argument("--baseline-commit", default="", help="the baseline's commit, for the history")
    parser.add_argument("--current-commit", default="", help="the current side's commit, for the history")
    args = parser.parse_args()
    setup_logging()
    trees = {"baseline": args.baseline, "current": args.current}
    try:
        verdicts, counted = run_gate(args.mode, trees, args.config, args.threshold, args.work, args.pairs)
    except (GateError, CountError, CompareError) as e:
        console.print(f"perf gate: {e}", highlight=False, markup=False)
        raise SystemExit(2) from None
    if counted:
        console.print(f"perf gate: {counted}", highlight=False, markup=False)
    print_wide(verdict_table(verdicts))
    code = exit_code(verdicts)
    try:
        _write_outputs(args, verdicts, code, counted)
    except OSError as e:
        console.print(f"perf gate: {e}", highlight=False, markup=False)
        raise SystemExit(2) from None
    if code == 3:
        unresolved = next(v for v in verdicts if v.verdict in INCONCLUSIVE)
        console.print(
            f"perf gate: can't tell: {unresolved.verdict} at {unresolved.threshold:.0%} after "
            f"{unresolved.trials[0]} pairs (exit 3)",
            highlight=False,
        )
    raise SystemExit(code)


def _write_outputs(args: argparse.Namespace, verdicts: list[Verdict], code: int, counted: str) -> None:
    if args.json is not None:
        write_verdicts(args.json, str(args.baseline), str(args.current), verdicts)
    title = f"llmbench perf gate ({args.mode}): {EXIT_WORDS[code]}"
    write_markdown(args.markdown, verdicts_markdown(title, verdicts, counted))
    if args.junit is not None:
        args.junit.write_text(verdicts_junit(f"llmbench perf gate ({args.mode})", verdicts))
    if args.history is not None:
        commits = (args.baseline_commit or str(args.baseline), args.current_commit or str(args.current))
        append_record(args.history, history_record(verdicts, code, args.mode, commits, args.config))


if __name__ == "__main__":
    main()
