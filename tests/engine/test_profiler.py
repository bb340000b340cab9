"""The engine's step profiler (engine/observe/profiler.py) under Nsight Systems: where nsys runs the process
(NSYS_PROFILING_SESSION_ID set) a window is the cudaProfilerApi capture range, and no torch trace is
written; one window at a time either way."""

from __future__ import annotations

import json

from llmbench.engine.observe.profiler import NSYS_ENV, StepProfiler


def test_under_nsys_a_window_is_the_capture_range_and_writes_no_trace(monkeypatch, tmp_path):
    monkeypatch.setenv(NSYS_ENV, "7")
    profiler = StepProfiler()
    started = profiler.start(str(tmp_path / "trace.json"))
    assert (started.status, started.message) == (
        200,
        "cudaProfilerStart: nsys captures the engine's steps from here",
    )
    assert profiler.start(str(tmp_path / "other.json")).status == 409
    stopped = profiler.stop()
    assert (stopped.status, stopped.trace) == (200, None) and stopped.message.startswith("cudaProfilerStop")
    assert profiler.stop().status == 409 and not list(tmp_path.iterdir())


def test_a_window_left_open_is_written_at_close(tmp_path):
    profiler = StepProfiler()
    assert profiler.start(str(tmp_path / "trace.json")).status == 200
    profiler.close()  # the engine's shutdown
    assert "traceEvents" in json.loads((tmp_path / "trace.json").read_text()) and not profiler.running
