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
