import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.engine.helpers import process_gone

CONFIG = "configs/quickstart.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.parametrize("split", ["false", "true"])
def test_serve_answers_then_stops_on_ctrl_c_leaving_no_process(split):
    port = free_port()
    command = [sys.executable, "-m", "llmbench", "serve", CONFIG, "--port", str(port)]
    server = subprocess.Popen([*command, "--set", f"engine.process_split={split}"])
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "server never became healthy"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        body = {"prompt": "hello", "max_tokens": 4, "ignore_eos": True}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body).json()
        assert reply["usage"]["completion_tokens"] == 4
        cores = children(server.pid)
        assert len(cores) == (split == "true")  # split: the engine core is the server's one child
        server.send_signal(signal.SIGINT)
        assert server.wait(30) == 130  # interrupted, as every llmbench command exits on Ctrl-C
        assert all(process_gone(pid) for pid in cores)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_serve_usage_errors_exit_2_with_one_line():
    bad = subprocess.run(
        [sys.executable, "-m", "llmbench", "serve", CONFIG, "--set", "model.preset=nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "quickstart.yaml: model.preset: unknown model preset 'nope'" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        busy = subprocess.run(
            [sys.executable, "-m", "llmbench", "serve", CONFIG, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert busy.returncode == 2 and "Address already in use" in busy.stdout + busy.stderr
