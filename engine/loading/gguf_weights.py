"""Fill a model from a Llama GGUF: each tensor dequantized to float32, cast to the model's dtype, the
parts of the fused projections concatenated as the HF checkpoint loader does, and a tensor-parallel
rank keeping its slice. One full tensor is held at a time, never the model."""

from __future__ import annotations

import torch
from llmbench.engine.loading.gguf_llama import GGUFLlama
from llmbench.engine.models.llama import LlamaForCausalLM
from llmbench.engine.parallel.sharding import shard_plan, take_shard


def load_gguf_weights(model: LlamaForCausalLM, checkpoint: GGUFLlama, hf_names) -> None:
    """Copy `checkpoint`'s tensors into `model`; hf_names(param name) lists the HF tensors that make
    up a parameter, in concatenation order (the loader's own mapping)."""
    group = model.group
    for name, param in model.named_parameters():
        sources = hf_names(name)
        missing = [s for s in sources if s not in checkpoint.names]
        if missing:
            raise ValueError(f"{checkpoint.file.path}: no tensor for {missing[0]} (needed for {name})")
        full = torch.cat([torch.from_numpy(checkpoint.tensor(s)) for s in sources], dim=0)
        plan = shard_plan(name, model.shape) if group.size > 1 else None
        value = take_shard(full, plan, group.rank, group.size)
        if value.shape != param.shape:
            raise ValueError(
                f"{checkpoint.file.path}: tensor for {name} has shape {tuple(value.shape)}, "
                f"expected {tuple(param.shape)}"
            )
        param.copy_(value)
