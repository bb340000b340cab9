"""Build the model a ModelConfig names: a preset shape with seeded random weights, or a local HF-format
directory (config.json + *.safetensors, single or sharded). Never touches the network. A tensor-
parallel rank gets only its shard: from a checkpoint it reads only its slices of each tensor."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import torch
from llmbench.engine.config import ModelConfig
from llmbench.engine.models.llama import Group, LlamaForCausalLM, rope_cos_sin_cache
from llmbench.engine.models.shape import PRESETS, LlamaShape
from llmbench.engine.parallel.group import LOCAL
from llmbench.engine.parallel.sharding import pad_to, part_range, shard_plan, take_shard
from llmbench.kernels import reference
from safetensors import SafetensorError, safe_open

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("model.device is 'cuda' but no CUDA device is available")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def resolve_max_model_len(max_model_len: int | None, shape: LlamaShape) -> int:
    """engine.max_model_len, defaulting to the model's max_position_embeddings and bounded by it."""
    if max_model_len is None:
        return shape.max_position_embeddings
    if max_model_len > shape.max_position_embeddings:
        raise ValueError(
            f"engine.max_model_len {max_model_len} exceeds the model's max_position_embeddings "
            f"{shape.max_position_embeddings}"
        )
    return max_model_len


def load_model(config: ModelConfig, ops: ModuleType = reference, group: Group = LOCAL) -> LlamaForCausalLM:
    """The model (this rank's shard of it) on its device and dtype, in eval mode, using the given op
    backend."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    path = Path(config.path) if config.path else None
    shape = model_shape(config)
    # build on meta so a large model is never materialized twice (or in float32 first)
    with torch.device("meta"):
        model = LlamaForCausalLM(shape, ops, group)
    model = model.to(dtype).to_empty(device=device)
    model.cos_sin_cache = rope_cos_sin_cache(shape, device)
    with torch.no_grad():
        if path:
            load_hf_weights(model, path)
        else:
            init_random_weights(model, config.seed)
    logger.info(
        "loaded %s: %.2fB params, %s on %s", path or config.preset, shape.num_params() / 1e9, dtype, device
    )
    return model.eval().requires_grad_(False)


def model_shape(config: ModelConfig) -> LlamaShape:
    """The shape the config names: read from the model directory's config.json when a path is given
    (it wins over the preset), else the preset's. Reads no weights."""
    return _read_hf_shape(Path(config.path)) if config.path else _preset_shape(config.preset)


def _preset_shape(name: str | None) -> LlamaShape:
    if name not in PRESETS:
        raise ValueError(f"model.preset: unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def _read_hf_shape(path: Path) -> LlamaShape:
    if not path.is_dir():
        raise ValueError(f"model.path: {path} is not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model.path: {config_file} not found: not an HF-format model directory")
    try:
        cfg = json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{config_file} is not valid JSON: {e}") from e
    architectures = cfg.get("architectures") or []
    if not any(a in SUPPORTED_ARCHITECTURES for a in architectures):
        raise ValueError(
            f"{config_file}: unsupported architecture {architectures}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    window = cfg.get("sliding_window")
    if window and cfg.get("use_sliding_window", True) and window < cfg.get("max_position_embeddings", 0):
        logger.warning(
            "%s: sliding window %d ignored; outputs differ from the reference past it", path, window
        )
    try:
        return LlamaShape.from_hf_config(cfg)
    except KeyError as e:
        raise ValueError(f"{config_file}: missing key {e}") from e
    except ValueError as e:
        raise ValueError(f"{config_file}: {e}") from e


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
