"""The shared `llmbench serve` app of a test module (tests/engine/serving/servers.py)."""

import pytest

from tests.engine.serving.servers import start_server


@pytest.fixture(scope="module")
def server():
    running = start_server(max_num_seqs=256)
    yield running
    running.stop()
