"""What a profile asks for: a tool (nsys or torch) and a range of engine steps, checked as the user typed
them, and passed to the child `llmbench run` in one environment variable,
LLMBENCH_PROFILE=<tool>:<A>:<B>:<out dir> (B may be empty: to the end). Steps A..B-1 are captured, as in a
Python slice; they count from the run's first, warm-up included, as the `step` column of steps.csv does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "LLMBENCH_PROFILE"
TOOLS = ("nsys", "torch")


class ProfileError(ValueError):
    """A user-caused profiling problem (bad --steps, profiler missing, nothing captured)."""


@dataclass(frozen=True)
class StepRange:
    start: int = 0
    stop: int | None = None  # exclusive; None: until the run ends

    def __str__(self) -> str:
        return f"{self.start}:{'' if self.stop is None else self.stop}"

    def covers(self, step: int) -> bool:
        return step >= self.start and (self.stop is None or step < self.stop)


def pick_tool(nsys: bool, torch: bool) -> str:
    """The profiler the command's flags name; exactly one must be set."""
    if nsys == torch:
        raise ProfileError("choose one profiler: --nsys or --torch")
    return "nsys" if nsys else "torch"


def parse_steps(text: str | None) -> StepRange:
    """'A:B' (steps A..B-1), 'A:' (A to the end) or None (every step)."""
    if text is None:
        return StepRange()
    start_text, colon, stop_text = text.partition(":")
    try:
        start = int(start_text) if start_text.strip() else 0
        stop = int(stop_text) if stop_text.strip() else None
    except ValueError:
        raise ProfileError(f"--steps: expected A:B with integers A < B, got {text!r}") from None
    if not colon or start < 0 or (stop is not None and stop <= start):
        raise ProfileError(f"--steps: expected A:B with integers 0 <= A < B, got {text!r}")
    return StepRange(start, stop)


def window_env(tool: str, steps: StepRange, out_dir: Path) -> dict[str, str]:
    """The environment entry that makes a child `llmbench run` profile `steps` with `tool`."""
    return {ENV_VAR: f"{tool}:{steps}:{out_dir}"}
