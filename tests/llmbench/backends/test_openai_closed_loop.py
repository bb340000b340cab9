"""One stream loop keeps the concurrency itself: in a closed loop it starts the next request the moment
a stream ends, without the runner, and never has more in flight than the limit. What the runner submits
reaches the loop before the runner's own work in poll."""

from __future__ import annotations

import time

import pytest
from llmbench.engine.request import SamplingParams

from llmbench.backends.openai import OpenAIBackend
from llmbench.backends.openai_loop import StreamSettings, ThreadLoop
from llmbench.config.load import parse_config
from llmbench.mock_server import MockServer, MockSettings
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark


def most_in_flight(records) -> int:
    """The most requests the mock held at once, from when it read each to its last write."""
    events = sorted([(r.received, 1) for r in records] + [(r.sends[-1], -1) for r in records])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_the_loop_starts_the_next_request_itself_when_a_stream_ends():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=2, output_tokens=4)) as mock:
        streams = ThreadLoop(StreamSettings(mock.url + "/completions", {}, 30.0, None, limit=2))
        try:
            body = b'{"model": "mock", "prompt": [5, 6], "max_tokens": 4, "stream": true}'
            due = time.perf_counter()
            for i in range(6):
                streams.start(str(i), body, due)
            items = streams.receive(0.0)  # hands the six over; the runner's side then stays away
            deadline = time.monotonic() + 30  # generous: a loaded 2-core host
            while sum(1 for r in mock.records() if r.tokens == 4) < 6 and time.monotonic() < deadline:
                time.sleep(0.05)
            served = mock.records()
            while True:
                more = streams.receive(0.1)
                if not more:
                    break
                items += more
        finally:
            streams.close()
    assert [r.tokens for r in served] == [4] * 6  # all six served while no one called receive()
    assert most_in_flight(served) == 2
    begun = {request_id: (stamp, submit) for request_id, stamp, submit in items if isinstance(submit, float)}
    ended = {request_id: stamp for request_id, stamp, data in items if data is None}
    assert set(begun) == set(ended) == {str(i) for i in range(6)}
    for i in range(6):
        send_start, submit = begun[str(i)]
        assert submit <= send_start
        if i < 2:
            assert submit == due  # the first window: at its due time
        else:  # a later one: when a stream that began before it ended, and the slot it took opened
            assert any(ended[str(j)] <= submit for j in range(i))
            assert submit > due


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_keeps_max_concurrency_and_stamps_each_submit_where_it_started(tmp_path, workers):
    """Two worker processes split the limit (2 + 1 of 3) and each keeps its share as one loop does."""
    run = {
        "name": "closed-loop",
        "model": {"preset": "tiny"},
        "workload": {
            "num_requests": 20,
            "max_concurrency": 3,
            "input": {"mean": 8},
            "output": {"dist": "uniform", "min": 2, "max": 12},
        },
        "output": {"report": False},
    }
    with MockServer(MockSettings(ttft_ms=1, itl_ms=1, output_tokens=16)) as mock:
        overrides = ["backend.type=openai", f"backend.url={mock.url}", f"backend.workers={workers}"]
        result = run_benchmark(parse_config(run, overrides), tmp_path / "run")
        served = [r for r in mock.records() if r.tokens > 1]  # not the preflight's one token
    rows = load_requests(tmp_path / "run")
    assert len(served) == len(rows) == 20 and all(r.finish_reason == "length" for r in rows)
    assert most_in_flight(served) == 3
    assert result.summary.to_dict()["client"]["max_in_flight"] == 3
    assert all(r.submit_time <= r.send_start_time < r.first_token_time for r in rows)
    # each submit a time its loop stamped: the first window's due time, or when a stream ended
    first = min(r.submit_time for r in rows)
    assert sum(r.submit_time == first for r in rows) == 3
    ends = [r.finish_time for r in rows]
    assert all(r.submit_time == first or any(end <= r.submit_time for end in ends) for r in rows)
    if workers == 1:  # one loop starts them in the workload's order
        by_submit = sorted(rows, key=lambda r: (r.submit_time, int(r.id)))
        assert [r.id for r in by_submit] == [str(i) for i in range(20)]


def test_a_submitted_request_is_sent_before_the_runners_work_in_poll():
    """poll() runs the runner's work while the streams go on (`while_waiting`: step rows, and a
    server's step records fetched over HTTP, 20-30 ms) only after handing the loop what was submitted:
    here that work waits for the mock to read the request, which it could not if the start were held
    until poll's wait for chunks."""
    run = {"name": "handover", "model": {"preset": "tiny"}, "output": {"report": False}}
    with MockServer(MockSettings(ttft_ms=0, itl_ms=1, output_tokens=2)) as mock:
        backend = OpenAIBackend()
        backend.start(parse_config(run, ["backend.type=openai", f"backend.url={mock.url}"]))
        try:
            before = len(mock.records())
            backend.submit("0", [5, 6, 7], SamplingParams(max_tokens=2), due=time.perf_counter())
            read_meanwhile = []

            def runner_work():
                deadline = time.monotonic() + 10  # generous: a loaded 2-core host
                while len(mock.records()) == before and time.monotonic() < deadline:
                    time.sleep(0.01)
                read_meanwhile.append(len(mock.records()) > before)

            backend.poll(runner_work)
            while backend.has_unfinished():
                backend.poll()
        finally:
            backend.close()
    assert read_meanwhile == [True]


def test_requests_handed_ahead_start_at_their_due_time():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=2)) as mock:
        streams = ThreadLoop(StreamSettings(mock.url + "/completions", {}, 30.0, None, limit=4))
        try:
            body = b'{"model": "mock", "prompt": [5, 6], "max_tokens": 2, "stream": true}'
            due = time.perf_counter() + 0.5
            for i in range(4):
                streams.start(str(i), body, due)
            streams.send_pending()
            items = []
            deadline = time.monotonic() + 30
            while sum(1 for item in items if item[2] is None) < 4 and time.monotonic() < deadline:
                items += streams.receive(0.1)
        finally:
            streams.close()
    begun = [(stamp, submit) for _, stamp, submit in items if isinstance(submit, float)]
    assert len(begun) == 4 and all(submit == due <= stamp for stamp, submit in begun)
