"""Which kernels serve a model: the op backend of EngineConfig.attention_backend, and whether the
kernels that the config's choices name can run this model on this device, refused before any weight is
read with the reason."""

from __future__ import annotations

import logging
import os
from types import ModuleType

import torch
from llmbench.engine.config import EngineConfig
from llmbench.engine.loading.model_facts import ModelFacts
from llmbench.kernels import flash_attention, reference

logger = logging.getLogger(__name__)


def select_ops(backend: str, device: torch.device) -> ModuleType:
    """The op backend for config.attention_backend ("auto": Triton on CUDA, torch elsewhere)."""
    if backend == "auto":
        backend = "triton" if device.type == "cuda" else "torch"
    if backend == "torch":
        return reference
    if device.type != "cuda" and not os.environ.get("TRITON_INTERPRET"):
        raise ValueError("engine.attention_backend is 'triton' but Triton kernels need a CUDA device")
    try:
        from llmbench.kernels import triton_ops
    except ImportError as e:
        logger.warning("Triton kernels unavailable (%s); using the torch backend", e)
        return reference
    return triton_ops


def checked_ops(config: EngineConfig, facts: ModelFacts) -> ModuleType:
    """select_ops, once the model's head dimension and dtype suit every kernel the config names."""
    ops = select_ops(config.attention_backend, facts.device)
    head_dim = facts.shape.head_dim
    if ops is not reference and head_dim & (head_dim - 1):
        # the Triton kernels tile a head in one power-of-two block
        raise ValueError(
            f"engine.attention_backend 'triton' needs a power-of-two head dimension, the model's is "
            f"{head_dim}; use attention_backend: torch"
        )
    if config.prefill_attention == "flash":
        if reason := flash_attention.unavailable_reason(facts.device, facts.dtype, head_dim):
            raise ValueError(f"engine.prefill_attention 'flash' {reason}")
    return ops
