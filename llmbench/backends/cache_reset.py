"""POST a server's prefix-cache reset (backend.reset_prefix_cache): vLLM's and ours at /reset_prefix_cache,
SGLang's at /flush_cache. The preflight calls it once, so a server that refuses stops the run before its
load; the runner before every timed trial."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from llmbench.config.schema import RunConfig

logger = logging.getLogger(__name__)

RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")  # vLLM's (and ours), then SGLang's
RESET_TIMEOUT_S = 60.0


def server_root(url: str) -> str:
    """scheme://host:port of a base URL (the reset is beside the API, not under /v1)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def root_of(config: RunConfig, backend: object) -> str:
    """The root of the server an HTTP run talks to: the `llmbench serve` started for it, or backend.url's."""
    return backend.url if config.backend.type == "server" else server_root(config.backend.url)


def reset_prefix_cache(root: str, headers: dict[str, str]) -> None:
    """POST the server's reset; ValueError naming backend.reset_prefix_cache when it refuses."""
    import httpx

    answers = []
    for path in RESET_PATHS:
        try:
            response = httpx.post(root + path, headers=headers, timeout=RESET_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise ValueError(
                f"backend.reset_prefix_cache: POST {root}{path}: {type(e).__name__}: {e}"
            ) from None
        if response.is_success:
            logger.info("prefix cache reset: POST %s%s", root, path)
            return
        answers.append(f"POST {root}{path} answered HTTP {response.status_code}")
        if response.status_code != 404:
            break
    raise ValueError(
        f"backend.reset_prefix_cache: the server refuses to reset its prefix cache ({'; '.join(answers)}); "
        "vLLM takes it with VLLM_SERVER_DEV_MODE=1, SGLang and llmbench serve always, else set it false"
    )
