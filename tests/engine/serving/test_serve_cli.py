import signal
import socket
import subprocess
import sys

import httpx
import pytest

from tests.engine.helpers import process_gone
from tests.engine.serving.servers import ServeProcess

CONFIG = "configs/quickstart.yaml"


@pytest.mark.parametrize("split", ["false", "true"])
def test_serve_answers_then_stops_on_ctrl_c_leaving_no_process(split):
    server = ServeProcess(CONFIG, f"engine.process_split={split}")
    try:
        body = {"prompt": "hello", "max_tokens": 4, "ignore_eos": True}
        reply = httpx.post(f"{server.url}/v1/completions", json=body).json()
        assert reply["usage"]["completion_tokens"] == 4
        cores = server.children()
        assert len(cores) == (split == "true")  # split: the engine core is the server's one child
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(30) == 130  # interrupted, as every llmbench command exits on Ctrl-C
        assert all(process_gone(pid) for pid in cores)
    finally:
        server.kill()


def serve_error(*args: str) -> str:
    """The one line `llmbench serve` exits 2 with."""
    done = subprocess.run(
        [sys.executable, "-m", "llmbench", "serve", CONFIG, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


def test_serve_usage_errors_exit_2_with_one_line():
    # a port this test holds: another program may hold the default (8000) on the machine that runs it
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        # the model's settings are checked before the port is bound: the preset is what is wrong
        bad = serve_error("--port", port, "--set", "model.preset=nope")
        busy = serve_error("--port", port)
    assert bad.startswith("error: quickstart.yaml: model.preset: unknown model preset 'nope'; presets: tiny")
    assert busy == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
