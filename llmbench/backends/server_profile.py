"""backend.profile_server (`llmbench run --profile-server`): POST the server's /start_profile before the
timed trials and /stop_profile after them, as vLLM's and SGLang's benchmarks do with --profile. vLLM and
SGLang write a torch profiler trace on the server (vLLM under VLLM_TORCH_PROFILER_DIR, SGLang under
SGLANG_TORCH_PROFILER_DIR); `llmbench serve` answers with the trace's path. A server that refuses is
told in one line, and the run goes on unprofiled: nothing measured is lost for it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from llmbench.results.summary import ServerProfile

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 600.0  # the server writes its trace before it answers: a long window's takes a while
ELSEWHERE = (
    "the server did not say where it wrote its trace: vLLM writes it under VLLM_TORCH_PROFILER_DIR on "
    "the server, SGLang under SGLANG_TORCH_PROFILER_DIR (default /tmp)"
)


@dataclass
class ServerProfiler:
    """Starts and stops a server's profiler, keeping what it said (summary.json's server_profile)."""

    url: str  # the server's root
    started: bool = False
    stopped: bool = False
    trace: str | None = None  # the trace's path on the server, where it says (llmbench serve)
    message: str = "the run ended before its timed trials"  # what the server answered, or why not

    def start(self, headers: dict[str, str]) -> None:
        ok, said, _ = _post(self.url + "/start_profile", headers, START_TIMEOUT_S)
        self.started = ok
        self.message = said if ok else f"the server was not profiled: {said}"
        (logger.info if ok else logger.warning)("server profile: %s", self.message)

    def stop(self, headers: dict[str, str]) -> None:
        if not self.started:
            return
        ok, said, self.trace = _post(self.url + "/stop_profile", headers, STOP_TIMEOUT_S)
        self.stopped = ok
        if ok and self.trace is None:
            said = f"{said}; {ELSEWHERE}" if said else ELSEWHERE
        self.message = said if ok else f"the profile did not stop: {said}"
        (logger.info if ok else logger.warning)("server profile: %s", self.message)

    def summary(self) -> ServerProfile:
        return ServerProfile(
            url=self.url, started=self.started, stopped=self.stopped, trace=self.trace, message=self.message
        )


def _post(url: str, headers: dict[str, str], timeout: float) -> tuple[bool, str, str | None]:
    """(whether the server took it, what it said, the trace path it names: llmbench serve's)."""
    import httpx

    try:
        response = httpx.post(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as e:
        return False, f"POST {url}: {type(e).__name__}: {e}", None
    said = _said(response)
    if not response.is_success:
        hint = (
            " (vLLM serves it only with VLLM_TORCH_PROFILER_DIR set)"
            if response.status_code in (404, 405)
            else ""
        )
        return (
            False,
            f"POST {url} answered HTTP {response.status_code}{hint}{': ' + said if said else ''}",
            None,
        )
    try:
        trace = response.json().get("trace")
    except (ValueError, AttributeError):  # vLLM answers with no body, SGLang with a line of text
        trace = None
    return True, said, trace


def _said(response) -> str:
    """The answer's message: ours and OpenAI's error bodies are JSON, SGLang's a line of text."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300]
    if isinstance(body, dict):
        error = body.get("error")
        return str((error.get("message") if isinstance(error, dict) else error) or body.get("message") or "")
    return ""
