import asyncio
import json
import os
import signal
import threading
import time

import httpx
import pytest

from tests.engine.helpers import process_gone
from tests.engine.serving.servers import start_server, stream_until_error

MAX_TOKENS = 3


def dechunk(body: bytes) -> bytes:
    """An HTTP/1.1 chunked body's payload."""
    payload, i = b"", 0
    while True:
        end = body.index(b"\r\n", i)
        size = int(body[i:end], 16)
        if size == 0:
            return payload
        payload += body[end + 2 : end + 2 + size]
        i = end + 4 + size


async def one_stream(port: int, i: int) -> tuple[int, str | None]:
    """(completion tokens from usage, finish_reason) of one streamed request, over a bare socket: httpx's
    connection pool takes seconds per hundred connections, far longer than the server."""
    body = json.dumps(
        {
            "prompt": [3 + i % 400, 4, 5 + i % 7],
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "POST /v1/completions HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
    writer.write(f"{head}content-length: {len(body)}\r\nconnection: close\r\n\r\n{body}".encode())
    response = await reader.read()
    writer.close()
    status, _, rest = response.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in status.lower()
    events = [e[6:] for e in dechunk(rest).decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    reasons = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]]
    return chunks[-1]["usage"]["completion_tokens"], reasons[0] if len(reasons) == 1 else reasons


async def many_streams(port: int, n: int) -> list[tuple[int, str | None]]:
    return await asyncio.gather(*(one_stream(port, i) for i in range(n)))


@pytest.mark.parametrize("split", [False, True], ids=["in-process", "split"])
def test_a_thousand_concurrent_streams_lose_nothing_and_leak_nothing(split):
    server = start_server(process_split=split, max_num_seqs=256)
    try:
        results = asyncio.run(many_streams(int(server.url.rsplit(":", 1)[1]), 1000))
        assert results == [(MAX_TOKENS, "length")] * 1000
        assert server.check_empty() is None
        assert server.state.metrics.finished.labels("tiny", "length")._value.get() == 1000
    finally:
        server.stop()


def test_killing_the_engine_core_fails_every_stream_within_5_s():
    server = start_server(process_split=True)
    core_pid = server.engine.engine._process.pid
    try:
        errors, threads, events = [], [], []
        for _ in range(8):
            opened = threading.Event()
            thread = threading.Thread(target=stream_until_error, args=(server.url, opened, errors))
            thread.start()
            threads.append(thread)
            events.append(opened)
        assert all(e.wait(30) for e in events)  # every stream is under way
        killed = time.monotonic()
        os.kill(core_pid, signal.SIGKILL)
        for thread in threads:
            thread.join(10)
        assert len(errors) == 8
        assert all(when - killed < 5 for when, _ in errors)
        assert all("engine core process exited unexpectedly (exit code -9)" in m for _, m in errors)
        health = httpx.get(server.url + "/health")
        assert health.status_code == 503 and "exited unexpectedly" in health.json()["error"]["message"]
        late = httpx.post(server.url + "/v1/completions", json={"prompt": [5], "max_tokens": 2})
        assert late.status_code == 503
        assert process_gone(core_pid)
    finally:
        server.stop()


def test_an_idle_server_notices_its_core_died():
    """With step-record drains going to the core as it dies: a send to a dead core once blocked the
    engine thread for ever, and the shutdown closing that socket from another thread aborted the
    process in libzmq."""
    server = start_server(process_split=True)
    drains, stop = [], threading.Event()

    def drain_until_stopped():
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while not stop.is_set():
                drains.append(client.post("/step_records/drain").status_code)

    drainer = threading.Thread(target=drain_until_stopped)
    drainer.start()
    try:
        while not drains:  # drains under way
            assert drainer.is_alive()
            time.sleep(0.01)
        os.kill(server.engine.engine._process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while httpx.get(server.url + "/health").status_code == 200:
            assert time.monotonic() < deadline, "/health still 200 five seconds after the core died"
            time.sleep(0.05)
        stop.set()
        drainer.join(15)
        assert not drainer.is_alive() and drains[-1] == 503 and set(drains) <= {200, 503}
    finally:
        stop.set()
        server.stop()


@pytest.mark.leaves_work
def test_an_in_process_engine_failure_fails_the_streams_and_health(monkeypatch):
    server = start_server()
    try:
        engine = server.engine.engine
        step = engine.step
        calls = []

        def failing_step():
            calls.append(1)
            if len(calls) > 3:
                raise RuntimeError("device lost")
            return step()

        monkeypatch.setattr(engine, "step", failing_step)
        errors, opened = [], threading.Event()
        stream_until_error(server.url, opened, errors)
        assert [m for _, m in errors] == ["engine failed: device lost"]
        assert httpx.get(server.url + "/health").status_code == 503
    finally:
        server.stop()
