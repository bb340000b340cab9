"""A Llama-architecture GGUF as the engine sees a Hugging Face checkpoint: its LlamaShape from the
metadata, and its tensors under HF names (model.layers.N.self_attn.q_proj.weight, ...) in HF's layout.

llama.cpp's converter reorders the rows of every head of q_proj and k_proj (HF's rotary pairs dimension
i with i + head_dim/2; llama.cpp's kernels pair neighbours 2i and 2i+1); reading undoes it, so the
engine's rotary and the reference's apply to the same weights. No torch here."""

from __future__ import annotations

import re

import numpy as np
from llmbench.engine.loading.gguf_file import GGUFError, GGUFFile
from llmbench.engine.models.shape import LlamaShape

ARCHITECTURE = "llama"  # Mistral and other Llama-shaped models are written under this name too

# GGUF tensor name -> HF name; {n} is the layer
_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")


class GGUFLlama:
    """A Llama GGUF checkpoint: `shape`, `names` (HF tensor names) and tensor(name) -> float32."""

    def __init__(self, path: str):
        self.file = GGUFFile(path)
        self.shape = llama_shape(self.file)
        self.file.check_types()  # refused before any weight is read
        self.sources = _hf_names(self.file)  # HF name -> GGUF name
        self.names = tuple(self.sources)

    def tensor(self, hf_name: str) -> np.ndarray:
        """The HF tensor `hf_name`, float32 in HF's layout."""
        value = self.file.read(self.sources[hf_name])
        if hf_name.endswith("self_attn.q_proj.weight"):
            return _unpermute(value, self.shape.num_heads)
        if hf_name.endswith("self_attn.k_proj.weight"):
            return _unpermute(value, self.shape.num_kv_heads)
        return value


def llama_shape(file: GGUFFile) -> LlamaShape:
    """The shape a Llama GGUF's metadata states; a GGUFError names what this engine cannot run."""
    meta = file.metadata
    architecture = meta.get("general.architecture")
    if architecture != ARCHITECTURE:
        raise GGUFError(
            f"{file.path}: architecture {architecture!r} is not supported (only {ARCHITECTURE!r})"
        )
    if "rope_freqs.weight" in file.tensors:
        raise GGUFError(f"{file.path}: per-frequency rope factors (Llama 3.1 scaling) are not supported")
    scaling = meta.get("llama.rope.scaling.type", "none")
    if scaling != "none":
        raise GGUFError(f"{file.path}: rope scaling {scaling!r} is not supported")

    def key(name: str, default=None):
        value = meta.get(f"llama.{name}", default)
        if value is None:
            raise GGUFError(f"{file.path}: metadata has no llama.{name}")
        return value

    hidden, heads = key("embedding_length"), key("attention.head_count")
    embeddings = file.tensors.get("token_embd.weight")
    if embeddings is None:
        raise GGUFError(f"{file.path}: no token_embd.weight tensor")
    return LlamaShape(
        hidden_size=hidden,
        num_layers=key("block_count"),
        num_heads=heads,
        num_kv_heads=key("attention.head_count_kv", heads),
        head_dim=key("attention.key_length", hidden // heads),
        intermediate_size=key("feed_forward_length"),
        vocab_size=embeddings.shape[0],
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        max_position_embeddings=key("context_length"),
        tie_word_embeddings="output.weight" not in file.tensors,
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id", -1),
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id", -1),
    )


def _hf_names(file: GGUFFile) -> dict[str, str]:
    """HF name -> GGUF name for every tensor; one this mapping does not know is an error, not dropped."""
    names = {}
    for name in file.tensors:
        if name in _GLOBAL:
            names[_GLOBAL[name]] = name
            continue
        match = _LAYER_NAME.fullmatch(name)
        if match is None or match.group(2) not in _LAYER:
            raise GGUFError(f"{file.path}: tensor {name} has no place in a Llama model")
        names[f"model.layers.{match.group(1)}.{_LAYER[match.group(2)]}"] = name
    return names


def _unpermute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Each head's rows from llama.cpp's interleaved rotary order back to HF's two halves."""
    rows, cols = weight.shape
    half = rows // num_heads // 2
    return weight.reshape(num_heads, half, 2, cols).swapaxes(1, 2).reshape(rows, cols)
