"""The garbage collector for a process that steps an engine: set once the model is loaded, by the engine
core process, the API server and the benchmark runner alike, so in-process and split runs pay the same."""

from __future__ import annotations

import gc

# allocations before a young collection (Python's default: 700). A step's outputs and a request's
# objects die within a step or two: collected every 700 allocations they are caught alive, promoted,
# and trigger full collections of the whole heap (0.2-0.3 s each on the 2-core CPU, mid-run)
YOUNG_GC_THRESHOLD = 50_000


def freeze_heap() -> None:
    """Once loading is done: what it left stays out of every later collection's scan (as vLLM's
    engine core and API server do), and young collections run rarely enough that per-step objects
    are freed by their reference counts first."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
