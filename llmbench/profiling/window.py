"""Which engine steps a profile covers, and the hook that starts and stops the profiler there.

`llmbench profile` runs the workload in a child `llmbench run` and tells it what to profile through
one environment variable, LLMBENCH_PROFILE=<tool>:<A>:<B>:<out dir> (B may be empty: to the end).
The bundled engine asks `window_from_env()` once, in its own process, and calls `before_step()` as
each engine step begins (a streamed multi-step window's later forwards are handed over without a new
step); for a backend whose polls are its steps (hf) the runner does so around each poll. Steps
A..B-1 are captured, as in a Python slice. Steps count from the run's first, warm-up included, as
the `step` column of steps.csv does."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

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


class ProfileWindow:
    """Starts the profiler before step `steps.start` and stops it before `steps.stop` (or at close)."""

    def __init__(self, tool: str, steps: StepRange, out_dir: Path):
        self.tool = tool
        self.steps = steps
        self.out_dir = out_dir
        self.next_step = 0
        self.active = False
        self.done = False
        self._torch = None

    def before_step(self) -> None:
        step, self.next_step = self.next_step, self.next_step + 1
        if self.done:
            return
        if not self.active and self.steps.covers(step):
            self._start()
        elif self.active and not self.steps.covers(step):
            self.close()

    def close(self) -> None:
        """Stop if still profiling; called at the end of the run as well."""
        if self.active:
            self._stop()
        self.done = True

    def _start(self) -> None:
        logger.info("%s profiling steps %s", self.tool, self.steps)
        if self.tool == "nsys":
            _cuda_profiler(start=True)
        else:
            from llmbench.profiling.torch_profile import TorchCapture

            self._torch = TorchCapture(self.out_dir)
            self._torch.start()
        self.active = True

    def _stop(self) -> None:
        if self.tool == "nsys":
            _cuda_profiler(start=False)
        else:
            self._torch.stop()
        self.active = False
        logger.info("%s profiling stopped", self.tool)


def _cuda_profiler(start: bool) -> None:
    """cudaProfilerStart/Stop: what `nsys profile --capture-range=cudaProfilerApi` waits for."""
    import torch

    if not torch.cuda.is_available():
        logger.warning("no CUDA device: nsys will capture nothing")
        return
    if start:
        torch.cuda.profiler.start()
    else:
        torch.cuda.profiler.stop()


def window_from_env() -> ProfileWindow | None:
    """The window the parent `llmbench profile` asked for, or None for an ordinary run."""
    value = os.environ.get(ENV_VAR)
    if not value:
        return None
    tool, _, rest = value.partition(":")
    start, _, rest = rest.partition(":")
    stop, _, out_dir = rest.partition(":")
    if tool not in TOOLS or not out_dir:
        raise ProfileError(f"{ENV_VAR}: expected <tool>:<A>:<B>:<dir>, got {value!r}")
    return ProfileWindow(tool, parse_steps(f"{start}:{stop}"), Path(out_dir))
