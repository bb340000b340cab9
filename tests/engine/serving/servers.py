"""A real `llmbench serve` app on 127.0.0.1 (a free port) in a thread of the test process, over the tiny
model on CPU, or the command itself in a child process, and what the tests check them with."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time

import httpx
from llmbench.engine.config import EngineConfig
from llmbench.engine.serving.api_server import ServerState, bind_socket, build_app, make_server

from tests.engine.helpers import TINY_CPU


class RunningServer:
    def __init__(
        self, config: EngineConfig, max_body_bytes: int | None = None, profile_dir: str | None = None
    ):
        self.state = ServerState(config, max_body_bytes, profile_dir)
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


def start_server(
    max_body_bytes: int | None = None, profile_dir: str | None = None, **engine
) -> RunningServer:
    return RunningServer(EngineConfig(model=TINY_CPU, **engine), max_body_bytes, profile_dir)


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


class ServeProcess:
    """`llmbench serve CONFIG --port P [--set ...]` as a child process, healthy once constructed."""

    def __init__(self, config: str, *settings: str):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "llmbench", "serve", config, "--port", str(port)]
        self.process = subprocess.Popen([*command, *(a for s in settings for a in ("--set", s))])
        try:
            deadline = time.monotonic() + 60
            while True:
                assert self.process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server never became healthy"
                try:
                    if httpx.get(self.url + "/health").status_code == 200:
                        return
                except httpx.TransportError:
                    time.sleep(0.1)
        except BaseException:
            self.kill()
            raise

    def children(self) -> list[int]:
        pid = self.process.pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
