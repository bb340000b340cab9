"""The CI regression gate's verdict (scripts/perf_gate.sh): a baseline tree against a current tree, in
one of two modes.

- `instructions` (the default): instructions per engine step of the config, counted under Valgrind
  (gate/instructions.py). One run a side; the count does not move with the runner's load.
- `wall`: CPU ms per engine step from interleaved runs (gate/wall_gate.py). For what counts cannot see:
  waits, syscalls, a GPU; it pays with the machine's noise and may answer "can't tell".

Exit codes: 0 pass, 1 regression (or a side that completed nothing), 2 usage or a side that cannot be
measured, 3 can't tell (the noise leaves the threshold unresolved). Each gate can append a record to a
history file, and write a Markdown summary and JUnit XML for the CI system. The command line is
cli/perf_gate.py."""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from pathlib import Path

from llmbench.gate.compare import MetricCheck, Verdict, decide, flag_served_nothing, parse_metric_spec
from llmbench.gate.history import HistoryRecord
from llmbench.gate.instructions import StepInstructions, count_sides
from llmbench.gate.wall_gate import METRIC as WALL_METRIC
from llmbench.gate.wall_gate import measure, measure_and_judge

COUNT_METRIC = "steps.instructions_per_step"
MODES = {"instructions": (COUNT_METRIC, "2%"), "wall": (WALL_METRIC, "10%")}  # metric, default threshold


def judge_counts(counts: dict[str, StepInstructions], check: MetricCheck) -> list[Verdict]:
    """A count has no run-to-run noise to speak of (A/A: docs/guides/ci-gate.md), so the verdict is the
    point change against the threshold."""
    base, cur = counts["baseline"], counts["current"]
    verdict = decide(check, base.per_step, cur.per_step, None, None, (1, 1))
    served = (counts["baseline"].completed, counts["current"].completed)
    return flag_served_nothing([verdict], served, (False, False))


def count_line(counts: dict[str, StepInstructions]) -> str:
    return "; ".join(
        f"{side} {c.instructions:,} instructions in {c.steps} steps ({c.per_step:,.0f} a step)"
        for side, c in counts.items()
    )


def run_gate(
    mode: str, trees: dict[str, Path], config: str, threshold: str | None, work: Path, pairs: int
) -> tuple[list[Verdict], str]:
    """Measure and judge in `mode`; the verdicts and, for counts, a line of what was counted."""
    metric, default_threshold = MODES[mode]
    check = parse_metric_spec(f"{metric}:{threshold or default_threshold}")
    if mode == "instructions":
        counts = count_sides(trees, config, work)
        return judge_counts(counts, check), count_line(counts)
    _, verdicts = measure_and_judge(lambda first: measure(trees, config, pairs, work, first), check)
    return verdicts, ""


def history_record(
    verdicts: list[Verdict], code: int, mode: str, commits: tuple[str, str], config: str
) -> HistoryRecord:
    """The gate's one record for the history file: the gated metric's row (not the `completed` one)."""
    gated = next((v for v in verdicts if v.metric != "completed"), verdicts[0])
    return HistoryRecord(
        commit=commits[1],
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        metric=gated.metric,
        mode=mode,
        value=gated.current,
        baseline_value=gated.baseline,
        baseline_commit=commits[0],
        change=gated.change,
        ci_low=gated.ci_low,
        ci_high=gated.ci_high,
        threshold=gated.threshold,
        verdict=gated.verdict,
        exit_code=code,
        config=config,
        host=platform.node(),
    )
