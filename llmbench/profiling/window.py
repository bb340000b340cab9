"""The hook that starts and stops the profiler around the engine steps a profile covers (profiling/steps.py).

`llmbench profile` runs the workload in a child `llmbench run` and tells it what to profile through
one environment variable. The bundled engine, handed STEP_HOOK by the run, asks `window_from_env()`
once, in its own process, and calls `before_step()` as each engine step begins (a streamed multi-step
window's later forwards are handed over without a new step); for a backend whose polls are its steps
(hf) the runner does so around each poll."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from llmbench.engine.observe.profiler import cuda_profiler
from llmbench.profiling.steps import ENV_VAR, TOOLS, ProfileError, StepRange, parse_steps

logger = logging.getLogger(__name__)

# the bundled engine's step hook by name (backends/bundled.py): a split core makes it in its own process
STEP_HOOK = f"{__name__}:window_from_env"


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
            cuda_profiler(start=True)
        else:
            from llmbench.profiling.torch_profile import TorchCapture

            self._torch = TorchCapture(self.out_dir)
            self._torch.start()
        self.active = True

    def _stop(self) -> None:
        if self.tool == "nsys":
            cuda_profiler(start=False)
        else:
            self._torch.stop()
        self.active = False
        logger.info("%s profiling stopped", self.tool)


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
