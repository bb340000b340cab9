"""The CI regression gate's verdict (scripts/perf_gate.sh): a baseline tree against a current tree, in
one of two modes.

- `instructions` (the default): instructions per engine step of the config, counted under Valgrind
  (gate/instructions.py). One run a side; the count does not move with the runner's load.
- `wall`: CPU ms per engine step from interleaved runs (gate/wall_gate.py). For what counts cannot see:
  waits, syscalls, a GPU; it pays with the machine's noise and may answer "can't tell".

Exit codes: 0 pass, 1 regression (or a side that completed nothing), 2 usage or a side that cannot be
measured, 3 can't tell (the noise leaves the threshold unresolved). Each gate can append a record to a
history file, and write a Markdown summary and JUnit XML for the CI system."""

from __future__ import annotations

import argparse
import platform
from datetime import datetime, timezone
from pathlib import Path

from llmbench.cli.common import print_wide
from llmbench.cli.console import console, setup_logging
from llmbench.gate.ci_outputs import verdicts_junit, verdicts_markdown, write_markdown
from llmbench.gate.compare import (
    INCONCLUSIVE,
    CompareError,
    MetricCheck,
    Verdict,
    decide,
    exit_code,
    flag_served_nothing,
    parse_metric_spec,
    verdict_table,
    write_verdicts,
)
from llmbench.gate.history import HistoryError, HistoryRecord, append_record
from llmbench.gate.instructions import CountError, StepInstructions, count_sides
from llmbench.gate.wall_gate import METRIC as WALL_METRIC
from llmbench.gate.wall_gate import GateError, measure, measure_and_judge

COUNT_METRIC = "steps.instructions_per_step"
MODES = {"instructions": (COUNT_METRIC, "2%"), "wall": (WALL_METRIC, "10%")}  # metric, default threshold


def judge_counts(counts: dict[str, StepInstructions], check: MetricCheck) -> list[Verdict]:
    """A count has no run-to-run noise to speak of (A/A: docs/guides/ci-gate.md), so the verdict is the
    point change against the threshold."""
    base, cur = counts["baseline"], counts["current"]
    verdict = decide(check, base.per_step, cur.per_step, None, None, (1, 1))
    served = [{"metrics": {"completed": counts[side].completed}} for side in ("baseline", "current")]
    return flag_served_nothing([verdict], *served, (False, False))


def count_line(counts: dict[str, StepInstructions]) -> str:
    return "; ".join(
        f"{side} {c.instructions:,} instructions in {c.steps} steps ({c.per_step:,.0f} a step)"
        for side, c in counts.items()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="The regression gate's measurement and verdict.")
    parser.add_argument("baseline", type=Path, help="tree whose code is the baseline")
    parser.add_argument("current", type=Path, help="tree whose code is judged")
    parser.add_argument("work", type=Path, help="directory for the runs")
    parser.add_argument("--mode", choices=sorted(MODES), default="instructions")
    parser.add_argument("--config", default="configs/ci.yaml", help="each tree's own config at this path")
    parser.add_argument("--pairs", type=int, default=20, help="wall mode: interleaved pairs a round")
    parser.add_argument(
        "--threshold", help="slowdown that fails: 2%% (instructions) or 10%% (wall) unless given"
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
    metric, default_threshold = MODES[args.mode]
    note = ""
    try:
        check = parse_metric_spec(f"{metric}:{args.threshold or default_threshold}")
        trees = {"baseline": args.baseline, "current": args.current}
        if args.mode == "instructions":
            counts = count_sides(trees, args.config, args.work)
            note = count_line(counts)
            verdicts = judge_counts(counts, check)
        else:
            _, verdicts = measure_and_judge(
                lambda first: measure(trees, args.config, args.pairs, args.work, first), check
            )
    except (GateError, CountError, CompareError) as e:
        console.print(f"perf gate: {e}", highlight=False, markup=False)
        raise SystemExit(2) from None
    if note:
        console.print(f"perf gate: {note}", highlight=False, markup=False)
    print_wide(verdict_table(verdicts))
    code = exit_code(verdicts)
    _write_outputs(args, verdicts, code, note)
    unresolved = [v for v in verdicts if v.verdict in INCONCLUSIVE]
    if code == 3:
        console.print(
            f"perf gate: can't tell: {unresolved[0].verdict} at {check.threshold:.0%} in "
            f"{unresolved[0].trials[0]} pairs (exit 3)",
            highlight=False,
        )
    raise SystemExit(code)


def _write_outputs(args: argparse.Namespace, verdicts: list[Verdict], code: int, note: str) -> None:
    if args.json is not None:
        write_verdicts(args.json, str(args.baseline), str(args.current), verdicts)
    title = f"llmbench perf gate ({args.mode}): " + {0: "pass", 1: "REGRESSION", 3: "can't tell"}[code]
    write_markdown(args.markdown, verdicts_markdown(title, verdicts, note))
    if args.junit is not None:
        args.junit.write_text(verdicts_junit(f"llmbench perf gate ({args.mode})", verdicts))
    if args.history is not None:
        gated = next(v for v in verdicts if v.metric != "completed") if len(verdicts) > 1 else verdicts[0]
        record = HistoryRecord(
            commit=args.current_commit or str(args.current),
            date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            metric=gated.metric,
            mode=args.mode,
            value=gated.current,
            baseline_value=gated.baseline,
            baseline_commit=args.baseline_commit or str(args.baseline),
            change=gated.change,
            ci_low=gated.ci_low,
            ci_high=gated.ci_high,
            threshold=gated.threshold,
            verdict=gated.verdict,
            exit_code=code,
            config=args.config,
            host=platform.node(),
        )
        try:
            append_record(args.history, record)
        except (OSError, HistoryError) as e:
            console.print(f"perf gate: --history {args.history}: {e}", highlight=False, markup=False)
            raise SystemExit(2) from None


if __name__ == "__main__":
    main()
