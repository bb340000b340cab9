"""`backend.type: server`: the run's own `llmbench serve`, started as a child process on a free loopback
port with the run's config, driven over HTTP by the openai backend, and stopped when the run ends, fails
or is interrupted. The API server is then inside the measurement, so `llmbench ablate` can toggle
engine.process_split with it in the loop."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import yaml

from llmbench.backends.openai import HAND_AHEAD_S, OpenAIBackend
from llmbench.config.schema import RunConfig
from llmbench.engine.observe.timing import StepRecord
from llmbench.engine.request import RequestOutput, SamplingParams

logger = logging.getLogger(__name__)

HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0  # SIGTERM, then this long for a clean exit, then SIGKILL
STEP_RECORDS_TIMEOUT_S = 30.0


class ServerBackend:
    profiles_own_steps = True  # engine steps run in the server's processes
    stamps_outputs = True
    keeps_concurrency = True  # its client's (OpenAIBackend)
    hands_ahead_s = HAND_AHEAD_S  # its client's
    served_model = None  # the config's model, served by llmbench serve

    def start(self, config: RunConfig) -> None:
        import httpx

        self._dir = tempfile.TemporaryDirectory(prefix="llmbench-serve-")
        config_path = Path(self._dir.name) / "serve.yaml"
        config_path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        self._log_path = Path(self._dir.name) / "serve.log"
        port = free_port()
        command = [sys.executable, "-m", "llmbench", "serve", str(config_path), "--host", "127.0.0.1"]
        command += ["--port", str(port)]
        logger.info("starting %s", " ".join(command))
        with open(self._log_path, "w") as log:
            # a session of its own: the terminal's Ctrl-C reaches the runner, which stops the server
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._client = OpenAIBackend()
        try:
            self.url = f"http://127.0.0.1:{port}"  # GET /metrics, /health: the server's own endpoints
            self._wait_healthy(self.url, config.backend.startup_timeout_s, httpx)
            ours = dataclasses.replace(
                config, backend=dataclasses.replace(config.backend, model=None, api_key_env=None)
            )
            self._client.connect(ours, f"{self.url}/v1", token_ids=True)
        except BaseException:
            self._stop()
            raise
        self.model_info = self._client.model_info

    def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        due: float | None = None,
        model: str | None = None,
    ) -> None:
        self._client.submit(request_id, prompt_token_ids, params, due)

    def poll(self, while_waiting: Callable[[], object] | None = None) -> list[RequestOutput]:
        if self._process.poll() is not None and self._client.has_unfinished():
            raise RuntimeError(f"llmbench serve exited with code {self._process.returncode}: {self._tail()}")
        return self._client.poll(while_waiting)

    def abort(self, request_id: str) -> None:
        self._client.abort(request_id)

    def has_unfinished(self) -> bool:
        return self._client.has_unfinished()

    def check_empty(self) -> None:
        self._client.check_empty()

    def client_usage(self) -> list[dict]:
        return self._client.client_usage()

    def drain_step_records(self) -> list[StepRecord]:
        """The server's engine steps since the last drain (its own endpoint: ours, not any server's)."""
        import httpx

        response = httpx.post(f"{self.url}/step_records/drain", timeout=STEP_RECORDS_TIMEOUT_S)
        response.raise_for_status()
        return msgspec.msgpack.decode(response.content, type=list[StepRecord])

    def close(self) -> None:
        try:
            self._client.close()
        finally:
            self._stop()

    def _wait_healthy(self, base: str, timeout_s: float, httpx) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ValueError(
                    f"backend.type server: llmbench serve exited with code {self._process.returncode}: "
                    f"{self._tail()}"
                )
            try:
                if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            time.sleep(HEALTH_POLL_S)
        raise ValueError(f"backend.startup_timeout_s: llmbench serve not healthy after {timeout_s:g} s")

    def _stop(self) -> None:
        """End the server and everything it started (its engine core), whatever state it is in."""
        if self._process.poll() is None:
            _signal_group(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                logger.warning("llmbench serve did not stop within %g s: killed", STOP_GRACE_S)
        # the group: an engine core left behind by a server that died or was killed goes too
        _signal_group(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._dir.cleanup()

    def _tail(self, lines: int = 5) -> str:
        text = self._log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(no output)"


def free_port() -> int:
    """A loopback port free now (the kernel's pick); the server binds it a moment later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the runner dies, even by SIGKILL (Linux), so no server
    outlives the run it served."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass  # already gone
