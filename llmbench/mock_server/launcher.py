"""The mock in a process of its own, started on a free loopback port and stopped with its handle."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Sequence

from llmbench.mock_server.settings import MockSettings
from llmbench.mock_server.streams import StreamRecord

START_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


class MockServer:
    """`with MockServer(settings) as mock:` serves at mock.url (the base URL, ending in the prefix);
    mock.records() is what it received and sent. `command_prefix` runs it under, say, taskset."""

    def __init__(self, settings: MockSettings | None = None, command_prefix: Sequence[str] = ()):
        self.settings = settings or MockSettings()
        self._command = [*command_prefix, sys.executable, "-m", "llmbench.mock_server"]
        self._command += self.settings.to_args()
        self._process: subprocess.Popen | None = None
        self.port = 0

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + self.settings.prefix.rstrip("/")

    @property
    def pid(self) -> int:
        return self._process.pid

    def start(self) -> MockServer:
        self._process = subprocess.Popen(self._command, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self._process.stdout], [], [], START_TIMEOUT_S)
        line = self._process.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"the mock server did not start: {line.strip() or 'no answer'}")
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def records(self, reset: bool = False) -> list[StreamRecord]:
        """Every completion request since the start (or the last reset), in arrival order; `reset`
        forgets them afterwards."""
        with urllib.request.urlopen(self.root + "/_mock/records", timeout=60) as response:
            records = [StreamRecord(**data) for data in json.load(response)]
        if reset:
            request = urllib.request.Request(self.root + "/_mock/reset", data=b"", method="POST")
            urllib.request.urlopen(request, timeout=60).close()
        return records

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def __enter__(self) -> MockServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
