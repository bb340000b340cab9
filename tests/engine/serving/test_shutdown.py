"""`llmbench serve` told to stop (SIGINT, SIGTERM) while streams are in flight: every stream ends with an
error event and [DONE] at once, rather than holding the exit until it has generated all its tokens."""

import signal
import threading
import time

import httpx
import pytest

from tests.engine.helpers import process_gone
from tests.engine.serving.servers import ServeProcess

# the null executor at 20 ms a forward: a stream of 1,500 tokens would run 30 s
CONFIG = """
model: {preset: tiny, device: cpu, dtype: float32, executor: "null", null_forward_ms: 20}
engine: {max_num_seqs: 8}
"""
STREAMS = 3


def stream(url: str, opened: threading.Event, ends: list) -> None:
    """One long stream; records (when it ended, its error message or None, whether [DONE] came)."""
    body = {"prompt": "hello", "max_tokens": 1500, "ignore_eos": True, "stream": True}
    error = None
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            opened.set()
            if line.startswith('data: {"error"'):
                error = line
            elif line == "data: [DONE]":
                ends.append((time.monotonic(), error, True))
                return
    ends.append((time.monotonic(), error, False))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("split", ["false", "true"], ids=["in-process", "split"])
def test_a_stop_signal_ends_every_stream_within_5_s_and_the_server_exits(tmp_path, split, sig):
    config = tmp_path / "slow.yaml"
    config.write_text(CONFIG)
    server = ServeProcess(str(config), f"engine.process_split={split}")
    try:
        cores = server.children()
        ends, threads, opened = [], [], []
        for _ in range(STREAMS):
            opened.append(threading.Event())
            threads.append(threading.Thread(target=stream, args=(server.url, opened[-1], ends)))
            threads[-1].start()
        assert all(e.wait(30) for e in opened)  # every stream is under way
        signalled = time.monotonic()
        server.process.send_signal(sig)
        for thread in threads:
            thread.join(30)
        assert len(ends) == STREAMS
        # 5 s: the streams end as shutdown begins, within milliseconds; the rest is room for a loaded host
        assert all(when - signalled < 5 for when, _, _ in ends), [when - signalled for when, _, _ in ends]
        assert all(done and "the server is shutting down" in error for _, error, done in ends)
        # Ctrl-C exits 130 as every llmbench command does; SIGTERM ends the process by its signal
        codes = (130,) if sig == signal.SIGINT else (-signal.SIGTERM, 128 + signal.SIGTERM)
        assert server.process.wait(30) in codes
        assert all(process_gone(pid) for pid in cores)
    finally:
        server.kill()
