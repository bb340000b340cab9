"""A served 2-rank engine whose worker rank is killed: every stream in flight fails with the rank's
reason, and stopping the server leaves no worker behind."""

import os
import signal
import threading

import pytest

from tests.engine.helpers import wait_gone
from tests.engine.serving.servers import start_server, stream_until_error


@pytest.mark.leaves_work
def test_killing_a_worker_rank_fails_every_stream_with_its_reason():
    server = start_server(tensor_parallel_size=2, max_num_seqs=8)
    worker = server.engine.engine.executor.group._workers.processes[0]
    try:
        errors, events = [], [threading.Event() for _ in range(3)]
        threads = [threading.Thread(target=stream_until_error, args=(server.url, e, errors)) for e in events]
        for thread in threads:
            thread.start()
        assert all(e.wait(30) for e in events)  # every stream is under way
        os.kill(worker.pid, signal.SIGKILL)
        for thread in threads:
            thread.join(30)
        assert [m for _, m in errors] == ["engine failed: tensor-parallel rank 1 exited with code -9"] * 3
    finally:
        server.stop()
    assert wait_gone([worker.pid])
