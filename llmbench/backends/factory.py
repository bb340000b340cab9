"""The backend a run config names, started."""

from __future__ import annotations

import dataclasses

from llmbench.backends.base import Backend
from llmbench.config.schema import RunConfig


def make_backend(config: RunConfig, step_hook: str | None = None) -> Backend:
    """The backend named by config.backend.type, started. `step_hook` names what the bundled engine calls
    at each of its steps (backends/bundled.py): the other backends' steps are not this process's."""
    from llmbench.device.environment import apply_cpu_threads

    apply_cpu_threads(config.hardware.cpu_threads)  # before any model loads or engine process starts
    if config.backend.type == "hf":
        from llmbench.backends.hf import HFBackend

        backend = HFBackend()
    elif config.backend.type == "openai":
        from llmbench.backends.openai import OpenAIBackend
        from llmbench.backends.preflight import preflight

        # before any load: a setting the server cannot take stops the run here, in one line
        url = preflight(config)
        config = dataclasses.replace(config, backend=dataclasses.replace(config.backend, url=url))
        backend = OpenAIBackend()
    elif config.backend.type == "server":
        from llmbench.backends.server import ServerBackend

        backend = ServerBackend()
    else:
        from llmbench.backends.bundled import BundledBackend

        backend = BundledBackend(step_hook)
    backend.start(config)
    return backend
