"""The stream workers' test run against the mock, and what their tests read of it: the rows in submit
order, and what finishes after a worker dies."""

from __future__ import annotations

import time

from llmbench.engine.request import SamplingParams

from llmbench.backends.openai import OpenAIBackend
from llmbench.config.load import parse_config
from llmbench.results.records import load_requests

RUN = {
    "name": "workers",
    "model": {"preset": "tiny"},
    "workload": {
        "num_requests": 24,
        "max_concurrency": 6,
        "input": {"dist": "uniform", "min": 3, "max": 30},
        "output": {"dist": "uniform", "min": 1, "max": 9},
    },
    "output": {"report": False},
}


def config(url: str, *overrides: str):
    return parse_config(RUN, ["backend.type=openai", f"backend.url={url}", *overrides])


def rows(run_dir) -> list[tuple]:
    """Each request's id, lengths and finish, in the workload's order (each worker starts its share of
    the requests in order, but two workers' slots open independently)."""
    records = sorted(load_requests(run_dir), key=lambda r: int(r.id))
    return [(r.id, r.prompt_len, r.output_len, len(r.token_times), r.finish_reason) for r in records]


def finished_after_a_worker_dies(url: str, kill, *overrides: str) -> dict:
    """Streams "a" and "b" on two workers, `kill(backend)` once both stream (the first worker has "a"),
    and "c" once "a" has failed; then the finished outputs by request id."""
    backend = OpenAIBackend()
    backend.start(config(url, "backend.workers=2", *overrides))
    try:
        for request_id in "ab":  # one each: the least busy worker takes the next stream
            backend.submit(request_id, [5, 6, 7], SamplingParams(max_tokens=100))
        first = set()
        while len(first) < 2:
            first |= {o.request_id for o in backend.poll()}
        kill(backend)
        finished = {}
        deadline = time.monotonic() + 30
        while backend.has_unfinished() and time.monotonic() < deadline:
            for output in backend.poll():
                if output.finished:
                    finished[output.request_id] = output
                    if output.request_id == "a":  # the dead worker has no stream now: it must get none
                        backend.submit("c", [5, 6, 7], SamplingParams(max_tokens=100))
    finally:
        backend.close()
    return finished
