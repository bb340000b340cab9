"""The CI regression gate's command, `python3 -m llmbench.cli.perf_gate BASELINE CURRENT WORK`, which
scripts/perf_gate.sh runs: it parses the arguments, has gate/perf_gate.py measure and judge, and prints the
verdict. Exit codes: 0 pass; 1 a regression, or noise too high to catch twice the threshold; 2 a side
that could not run the config, or a bad threshold."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmbench.cli.common import print_wide
from llmbench.cli.console import console, setup_logging
from llmbench.gate.compare import (
    NOT_ENOUGH,
    CompareError,
    has_regression,
    parse_metric_spec,
    verdict_table,
    write_verdicts,
)
from llmbench.gate.perf_gate import METRIC, GateError, measure, measure_and_judge


def main() -> None:
    parser = argparse.ArgumentParser(description="Interleaved baseline/current runs and the gate's verdict.")
    parser.add_argument("baseline", type=Path, help="tree whose code is the baseline")
    parser.add_argument("current", type=Path, help="tree whose code is judged")
    parser.add_argument("work", type=Path, help="directory for the runs")
    parser.add_argument("--config", default="configs/ci.yaml", help="each tree's own config at this path")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--threshold", default="10%", help="slowdown that fails: 10%% or 0.1")
    parser.add_argument("--json", type=Path, help="write the verdicts here")
    args = parser.parse_args()
    setup_logging()
    try:
        check = parse_metric_spec(f"{METRIC}:{args.threshold}")
        trees = {"baseline": args.baseline, "current": args.current}
        _, verdicts = measure_and_judge(
            lambda first: measure(trees, args.config, args.pairs, args.work, first), check
        )
    except (GateError, CompareError) as e:
        console.print(f"perf gate: {e}", highlight=False, markup=False)
        raise SystemExit(2) from None
    print_wide(verdict_table(verdicts))
    if args.json is not None:
        write_verdicts(args.json, str(args.baseline), str(args.current), verdicts)
    if has_regression(verdicts):
        raise SystemExit(1)
    unresolved = [v for v in verdicts if v.verdict == NOT_ENOUGH]
    if unresolved:
        message = f"too noisy to catch twice {check.threshold:.0%} in {unresolved[0].trials[0]} pairs"
        console.print(f"perf gate: {message}: failing", highlight=False)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
