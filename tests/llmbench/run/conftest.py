import pytest

from tests.engine.serving.servers import start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `llmbench serve` app over the tiny model on CPU (127.0.0.1, a free port), one a test module,
    stopped after it; its profile traces go to a temporary directory."""
    running = start_server(profile_dir=str(tmp_path_factory.mktemp("serve-profiles")))
    yield running
    running.stop()
