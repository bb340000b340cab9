"""The engine's profiler over a window of its steps, opened and closed between two steps: `llmbench serve`'s
POST /start_profile and /stop_profile, the endpoints vLLM and SGLang serve. It writes a torch.profiler
Chrome trace of the host and, where there is one, the CUDA device; in a process Nsight Systems runs (nsys
sets NSYS_PROFILING_SESSION_ID in it) it calls cudaProfilerStart and cudaProfilerStop instead, the
range `nsys profile --capture-range=cudaProfilerApi` captures. llmbench's `profile` command opens the
same two kinds of window over chosen steps (llmbench/profiling/window.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

logger = logging.getLogger(__name__)

NSYS_ENV = "NSYS_PROFILING_SESSION_ID"


class ProfileAnswer(msgspec.Struct, array_like=True):
    """What a start or stop did: HTTP's status (200; 409: already running, or not running; 500: the
    profiler failed), a sentence for the client, and the trace file a stop wrote."""

    status: int
    message: str
    trace: str | None = None


def under_nsys() -> bool:
    return bool(os.environ.get(NSYS_ENV))


def cuda_profiler(start: bool) -> None:
    """cudaProfilerStart/Stop: what `nsys profile --capture-range=cudaProfilerApi` waits for."""
    import torch

    if not torch.cuda.is_available():
        logger.warning("no CUDA device: nsys will capture nothing")
        return
    if start:
        torch.cuda.profiler.start()
    else:
        torch.cuda.profiler.stop()


def torch_profiler():
    """A torch.profiler session of the host's ops and, with a CUDA device, its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    return profile(activities=activities)


class StepProfiler:
    """One window at a time, started and stopped by the engine between two of its steps."""

    def __init__(self) -> None:
        self._torch = None
        self._nsys = False
        self._trace: Path | None = None

    @property
    def running(self) -> bool:
        return self._nsys or self._torch is not None

    def start(self, trace: str) -> ProfileAnswer:
        """Start profiling; a torch trace goes to `trace` at the stop."""
        if self.running:
            return ProfileAnswer(409, "the profiler is already running: POST /stop_profile first")
        try:
            if under_nsys():
                cuda_profiler(start=True)
                self._nsys = True
                return ProfileAnswer(200, "cudaProfilerStart: nsys captures the engine's steps from here")
            session = torch_profiler()
            session.start()
        except Exception as e:  # a profiler already running in this process (llmbench profile --torch)
            return ProfileAnswer(500, f"the profiler did not start: {type(e).__name__}: {e}")
        self._torch, self._trace = session, Path(trace)
        logger.info("torch profiler started; the trace goes to %s", self._trace)
        return ProfileAnswer(200, f"torch profiler started; the trace goes to {self._trace}")

    def stop(self) -> ProfileAnswer:
        """Stop profiling and write the trace (under nsys, nsys writes its own report)."""
        if not self.running:
            return ProfileAnswer(409, "the profiler is not running: POST /start_profile first")
        if self._nsys:
            self._nsys = False
            cuda_profiler(start=False)
            return ProfileAnswer(200, "cudaProfilerStop: the nsys capture range ends here")
        session, self._torch = self._torch, None
        try:
            session.stop()
            self._trace.parent.mkdir(parents=True, exist_ok=True)
            session.export_chrome_trace(str(self._trace))
        except Exception as e:
            return ProfileAnswer(500, f"the profiler did not write its trace: {type(e).__name__}: {e}")
        logger.info("torch profile written to %s", self._trace)
        return ProfileAnswer(200, f"torch profile written to {self._trace}", str(self._trace))

    def close(self) -> None:
        """At shutdown: a window left open is closed, its trace written."""
        if self.running:
            self.stop()
