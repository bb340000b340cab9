"""summary.json's `environment` as a type, apart from the code that fills it (device/environment.py), so
that reading a result file does not import torch."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType


class Environment(msgspec.Struct, kw_only=True):
    """Versions and hardware a run had (summary.json's `environment`); None where there is none."""

    llmbench: str | None = None
    git_commit: str | None = None
    python: str | None = None
    platform: str | None = None
    cpu: str | None = None
    cpu_cores: int | None = None
    torch_threads: int | None = None
    torch: str | None = None
    triton: str | None = None
    transformers: str | None = None
    flash_attn_4: str | None | UnsetType = UNSET
    gpu: str | None = None
    gpu_memory_gb: float | None = None
    cuda: str | None = None
    command: str | None = None
