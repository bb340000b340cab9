"""POST /start_profile and /stop_profile on a real `llmbench serve` app, in process and with the split
core: the steps in between land in a torch profiler trace, and a second start or a stop of nothing is a
409."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.engine.serving.servers import start_server


@pytest.fixture(params=["in process", "split core"], scope="module")
def server(request, tmp_path_factory):
    running = start_server(
        profile_dir=str(tmp_path_factory.mktemp("profiles")), process_split=request.param == "split core"
    )
    yield running
    running.stop()


def test_a_profile_window_writes_a_torch_trace_of_the_steps_between(server):
    started = httpx.post(server.url + "/start_profile")
    assert started.status_code == 200 and "torch profiler started" in started.json()["message"]
    again = httpx.post(server.url + "/start_profile")
    assert again.status_code == 409 and "already running" in again.json()["error"]["message"]
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 4, "ignore_eos": True}
    assert httpx.post(server.url + "/v1/completions", json=body).json()["usage"]["completion_tokens"] == 4
    stopped = httpx.post(server.url + "/stop_profile", timeout=120)
    assert stopped.status_code == 200
    trace = json.loads(open(stopped.json()["trace"]).read())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::embedding" in names  # the model's forward ran inside the window
    nothing = httpx.post(server.url + "/stop_profile")
    assert nothing.status_code == 409 and "not running" in nothing.json()["error"]["message"]
    # a second window gets a file of its own
    httpx.post(server.url + "/start_profile")
    second = httpx.post(server.url + "/stop_profile", timeout=120).json()["trace"]
    assert second != stopped.json()["trace"]
    assert server.check_empty() is None
