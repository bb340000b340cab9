"""What every part of the engine must agree on about the model before anything is built: its shape, the
longest sequence it runs, and the device and dtype it runs in. Resolved from the config once per process
(resolve_model_facts) and handed down to kernel choice, the loader, the KV pool, the model runner, the
null executor and the tensor-parallel launch, so none of them reads these from the config again."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from llmbench.engine.config import EngineConfig
from llmbench.engine.loading.source import model_shape, resolve_max_model_len
from llmbench.engine.models.shape import LlamaShape

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelFacts:
    shape: LlamaShape
    max_model_len: int  # engine.max_model_len, or the model's max_position_embeddings
    device: torch.device
    dtype: torch.dtype

    @property
    def vocab_size(self) -> int:
        return self.shape.vocab_size


def resolve_model_facts(config: EngineConfig) -> ModelFacts:
    """The model facts of an engine config; a ValueError names the setting that cannot be met."""
    shape = model_shape(config.model)
    max_model_len = resolve_max_model_len(config.max_model_len, shape)
    if config.model.executor == "null":
        # no model runs: its host buffers live on the CPU, whatever model.device says, and its KV pool
        # is sized in the dtype a GPU run of the same config would hold
        dtype = _dtype(config.model.dtype, torch.device("cuda"))
        return ModelFacts(shape, max_model_len, torch.device("cpu"), dtype)
    device = _device(config.model.device)
    return ModelFacts(shape, max_model_len, device, _dtype(config.model.dtype, device))


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("model.device is 'cuda' but no CUDA device is available")
    return torch.device(name)


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]
