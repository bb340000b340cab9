"""A real `llmbench serve` app on 127.0.0.1 (a free port) in a thread of the test process, over the tiny
model on CPU, and what the tests check it with."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
from llmbench.engine.config import EngineConfig
from llmbench.engine.serving.api_server import ServerState, bind_socket, build_app, make_server

from tests.engine.helpers import TINY_CPU


class RunningServer:
    def __init__(self, config: EngineConfig):
        self.state = ServerState(config)
        sock = bind_socket("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = make_server(build_app(self.state))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.01)

    @property
    def engine(self):
        return self.state.engine

    def check_empty(self, timeout_s: float = 10.0) -> str | None:
        """What the engine still holds, once aborts sent by the server have had time to land."""
        deadline = time.monotonic() + timeout_s
        while True:
            future = asyncio.run_coroutine_threadsafe(self.engine.check_empty(), self.engine.loop)
            failure = future.result(timeout_s)
            if failure is None or time.monotonic() > deadline:
                return failure
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def start_server(**engine) -> RunningServer:
    return RunningServer(EngineConfig(model=TINY_CPU, **engine))


def stream_until_error(url: str, opened: threading.Event, errors: list) -> None:
    """Stream a long request; record (seconds from the first chunk to the error, the error message)."""
    body = {"prompt": [5, 6, 7], "max_tokens": 1900, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as response:
        for line in response.iter_lines():
            opened.set()
            if line.startswith('data: {"error"'):
                errors.append((time.monotonic(), json.loads(line[6:])["error"]["message"]))
            elif line == "data: [DONE]":
                return
