"""Build the model a ModelConfig names, in the shape, device and dtype its ModelFacts hold: a preset with
seeded random weights, a local HF-format directory (*.safetensors, single or sharded), or a Llama GGUF
file (model.path, or a packaged model's; dequantized as it is read, gguf_weights.py). Never touches
the network. A tensor-parallel rank gets only its shard: from a checkpoint it reads only its slices of
each tensor."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import torch
from llmbench.engine.config import ModelConfig
from llmbench.engine.loading.gguf_llama import GGUFLlama
from llmbench.engine.loading.gguf_weights import load_gguf_weights
from llmbench.engine.loading.model_facts import ModelFacts
from llmbench.engine.loading.packaged import is_gguf, weights_path
from llmbench.engine.models.llama import LlamaForCausalLM, rope_cos_sin_cache
from llmbench.engine.parallel.group import LOCAL, Group
from llmbench.engine.parallel.sharding import pad_to, part_range, shard_plan, take_shard
from llmbench.kernels import reference
from safetensors import SafetensorError, safe_open

logger = logging.getLogger(__name__)


def load_model(
    config: ModelConfig, facts: ModelFacts, ops: ModuleType = reference, group: Group = LOCAL
) -> LlamaForCausalLM:
    """The model (this rank's shard of it) on the facts' device and dtype, in eval mode, using the given
    op backend: the weights the config names, of the facts' shape."""
    shape, device, dtype = facts.shape, facts.device, facts.dtype
    path = weights_path(config)
    # build on meta so a large model is never materialized twice (or in float32 first)
    with torch.device("meta"):
        model = LlamaForCausalLM(shape, ops, group)
    model = model.to(dtype).to_empty(device=device)
    model.cos_sin_cache = rope_cos_sin_cache(shape, device)
    with torch.no_grad():
        if path is None:
            init_random_weights(model, config.seed)
        elif is_gguf(path):
            load_gguf_weights(model, GGUFLlama(str(path)), hf_tensor_names)
        else:
            load_hf_weights(model, path)
    logger.info(
        "loaded %s: %.2fB params, %s on %s", path or config.preset, shape.num_params() / 1e9, dtype, device
    )
    return model.eval().requires_grad_(False)


def init_random_weights(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded normal(0, 0.02) weights, norms at 1: logits spread enough that greedy decoding is not
    degenerate, and the same seed gives the same model on the same device type, at any tensor-
    parallel size: a rank draws each full tensor in turn, as one rank would, and keeps its slice (so
    at most one full tensor, never the model, is held at once)."""
    generator = torch.Generator(device=model.embed_tokens.weight.device).manual_seed(seed)
    group = model.group
    for name, param in model.named_parameters():
        plan = shard_plan(name, model.shape)
        if name.endswith("layernorm.weight") or name == "norm.weight":
            param.fill_(1.0)
        elif group.size == 1 or plan is None:
            param.normal_(0.0, 0.02, generator=generator)
        else:
            dim, parts = plan
            full = param.new_empty(param.shape[:dim] + (sum(parts),) + param.shape[dim + 1 :])
            param.copy_(
                take_shard(full.normal_(0.0, 0.02, generator=generator), plan, group.rank, group.size)
            )


def hf_tensor_names(name: str) -> list[str]:
    """The HF checkpoint tensors that make up one of our parameters, in concatenation order."""
    for fused, parts in (
        ("qkv_proj", ("q_proj", "k_proj", "v_proj")),
        ("gate_up_proj", ("gate_proj", "up_proj")),
    ):
        if f".{fused}." in name:
            return [f"model.{name.replace(fused, part)}" for part in parts]
    return [name if name.startswith("lm_head.") else f"model.{name}"]


def load_hf_weights(model: LlamaForCausalLM, path: Path) -> None:
    """Copy checkpoint tensors into the model, concatenating the parts of fused projections. A
    parameter is copied as soon as all its parts are read, so host memory holds about one shard."""
    files = _tensor_files(path)
    params = dict(model.named_parameters())
    group = model.group
    wanted = {name: hf_tensor_names(name) for name in params}
    owner: dict[str, str] = {}
    by_file: dict[Path, list[str]] = defaultdict(list)
    for name, sources in wanted.items():
        for source in sources:
            if source not in files:
                raise ValueError(f"{path}: checkpoint has no tensor {source!r} (needed for {name})")
            owner[source] = name
            by_file[files[source]].append(source)
    pending: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for file, sources in by_file.items():
        with _open(file) as f:
            for source in sources:
                name = owner[source]
                parts = pending[name]
                plan = shard_plan(name, model.shape) if group.size > 1 else None
                parts[source] = (
                    f.get_tensor(source) if plan is None else _read_slice(f, source, plan[0], group)
                )
                if len(parts) < len(wanted[name]):
                    continue
                value = torch.cat([parts[s] for s in wanted[name]], dim=0)
                if value.shape != params[name].shape:
                    raise ValueError(
                        f"{path}: tensor for {name} has shape {tuple(value.shape)}, "
                        f"expected {tuple(params[name].shape)}"
                    )
                params[name].copy_(value)
                del pending[name]


def _read_slice(f, source: str, dim: int, group: Group) -> torch.Tensor:
    """Only this rank's rows (dim 0) or columns (dim 1) of a checkpoint tensor are read."""
    tensor = f.get_slice(source)
    length = tensor.get_shape()[dim]
    start, end = part_range(length, group.rank, group.size)
    piece = tensor[start:end] if dim == 0 else tensor[:, start:end]
    return pad_to(piece, dim, -(-length // group.size))


def _tensor_files(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{index} is not a valid safetensors index: {e}") from e
        return {name: path / file for name, file in weight_map.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path}: no *.safetensors weights found")
    names = {}
    for file in files:
        with _open(file) as f:
            names.update(dict.fromkeys(f.keys(), file))
    return names


def _open(file: Path):
    if not file.is_file():
        raise ValueError(f"weights file {file} not found")
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{file} is not a readable safetensors file: {e}") from e
