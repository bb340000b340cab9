"""The shape of the model a ModelConfig names, read without its weights: a preset's, an HF directory's
config.json, or a GGUF's metadata (model.path, which wins over the preset, or a packaged model's file);
and the longest sequence the engine runs on it. Nothing here imports torch: an HTTP client learns a
model's vocabulary and length from it alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmbench.engine.config import ModelConfig
from llmbench.engine.loading.packaged import PACKAGED, is_gguf, weights_path
from llmbench.engine.models.shape import PRESETS, LlamaShape

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


def model_shape(config: ModelConfig) -> LlamaShape:
    """The shape the config names: read from the weights' config.json or GGUF metadata when there are
    weights (model.path, which wins over the preset, or a packaged model's file), else the preset's.
    Reads no weights."""
    path = weights_path(config)
    if path is None:
        return _preset_shape(config.preset)
    if is_gguf(path):
        from llmbench.engine.loading.gguf_file import GGUFFile  # numpy and gguf: only for a GGUF
        from llmbench.engine.loading.gguf_llama import llama_shape

        return llama_shape(GGUFFile(path))
    return _read_hf_shape(path)


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


def _preset_shape(name: str | None) -> LlamaShape:
    if name not in PRESETS:
        names = ", ".join([*PRESETS, *PACKAGED])
        raise ValueError(f"model.preset: unknown model preset {name!r}; presets: {names}")
    return PRESETS[name]


def _read_hf_shape(path: Path) -> LlamaShape:
    if not path.is_dir():
        raise ValueError(f"model.path: {path} is not a directory nor a .gguf file")
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
