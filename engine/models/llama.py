"""The Llama family (Llama 2/3, Mistral, Qwen2) in one file, its shape and presets apart (shape.py): a
model running flattened tokens of many sequences against a paged KV cache. Q/K/V and gate/up are fused
(the loader concatenates HF's weights). With tensor parallelism each rank builds the same model over its
shard: a share of the heads and MLP channels and a slice of the vocabulary (engine/parallel/sharding.py),
one all-reduce after each row-parallel projection and a gather of the logits. Every op, matmuls
included, comes from a backend module (kernels.reference or kernels.triton_ops, identical
signatures; triton_ops adds GEMVs and fusions for decode)."""

from __future__ import annotations

import math
from types import ModuleType

import torch
from llmbench.engine.execution.kv_pool import KVCache
from llmbench.engine.execution.step_layout import AttentionMetadata
from llmbench.engine.models.shape import LlamaShape
from llmbench.engine.parallel.group import LOCAL, Group
from llmbench.engine.parallel.vocab_embedding import VocabParallelEmbedding
from llmbench.kernels import reference
from llmbench.kernels.attention_split import split_attention
from torch import nn


def rope_cos_sin_cache(shape: LlamaShape, device: torch.device) -> torch.Tensor:
    """[max_position_embeddings, head_dim] float32: cos in the first half, sin in the second. Float32
    even for bf16 models, as HF does, so long positions keep their precision."""
    dim = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if shape.rope_scaling is not None:
        inv_freq = _llama3_scaled(inv_freq, shape.rope_scaling)
    positions = torch.arange(shape.max_position_embeddings, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device)


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1 context extension: long wavelengths are slowed by `factor`, short ones kept, and the
    band between blended smoothly."""
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    in_band = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(in_band, blended, scaled)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, ops: ModuleType):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.ops = ops

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ops.rms_norm(x, self.weight, self.eps, residual)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape, ops: ModuleType, group: Group):
        super().__init__()
        self.ops, self.group, self.head_dim = ops, group, shape.head_dim
        self.num_heads = shape.num_heads // group.size  # this rank's heads
        self.q_size = shape.q_size // group.size
        self.kv_size = shape.kv_size // group.size
        self.qkv_proj = nn.Linear(
            shape.hidden_size, self.q_size + 2 * self.kv_size, bias=shape.attention_bias
        )
        self.o_proj = nn.Linear(self.q_size, shape.hidden_size, bias=False)
        self.scale = shape.head_dim**-0.5

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        attn: AttentionMetadata,
        kv_cache: KVCache,
        cos_sin_cache: torch.Tensor,
    ) -> torch.Tensor:
        ops = self.ops
        qkv = ops.linear(x, self.qkv_proj.weight, self.qkv_proj.bias)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        k_cache, v_cache = kv_cache
        split = attn.split
        if split is not None and split.needs_own_kv:
            # a part reads this step's rotated k, which the fused RoPE + KV write never materializes
            q, k = ops.rotary_embedding(positions, q, k, cos_sin_cache, self.head_dim)
            q, k, v = (t.view(t.shape[0], -1, self.head_dim) for t in (q, k, v))
            ops.write_kv(k, v, k_cache, v_cache, attn.slot_mapping)
        else:
            q = ops.rope_and_write_kv(
                positions, q, k, v, cos_sin_cache, self.head_dim, k_cache, v_cache, attn.slot_mapping
            ).reshape(-1, self.num_heads, self.head_dim)
            k = v = None
        tables, lens = attn.block_tables, attn.seq_lens
        if split is not None:
            out = split_attention(q, k, v, k_cache, v_cache, split, self.scale, ops)
        elif attn.decode_only:
            out = ops.paged_decode_attention(q, k_cache, v_cache, tables, lens, self.scale)
        else:
            starts = attn.query_start_loc
            out = ops.paged_prefill_attention(q, k_cache, v_cache, tables, starts, lens, self.scale)
        return self.group.all_reduce(ops.linear(out.reshape(-1, self.q_size), self.o_proj.weight))


class MLP(nn.Module):
    def __init__(self, shape: LlamaShape, ops: ModuleType, group: Group):
        super().__init__()
        self.ops, self.group = ops, group
        channels = shape.intermediate_size // group.size  # this rank's
        self.gate_up_proj = nn.Linear(shape.hidden_size, 2 * channels, bias=False)
        self.down_proj = nn.Linear(channels, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.ops.linear_silu_and_mul(x, self.gate_up_proj.weight)
        return self.group.all_reduce(self.ops.linear(activated, self.down_proj.weight))


class DecoderLayer(nn.Module):
    def __init__(self, shape: LlamaShape, ops: ModuleType, group: Group):
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps, ops)
        self.self_attn = Attention(shape, ops, group)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps, ops)
        self.mlp = MLP(shape, ops, group)

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        attn: AttentionMetadata,
        kv_cache: KVCache,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # the residual add is fused into each norm: the stream is carried separately
        hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, attn, kv_cache, cos_sin_cache)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaForCausalLM(nn.Module):
    def __init__(self, shape: LlamaShape, ops: ModuleType = reference, group: Group = LOCAL):
        super().__init__()
        self.shape = shape
        self.ops = ops
        self.group = group
        self.embed_tokens = VocabParallelEmbedding(shape.vocab_size, shape.hidden_size, group)
        self.layers = nn.ModuleList(DecoderLayer(shape, ops, group) for _ in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps, ops)
        vocab_rows = self.embed_tokens.rows
        self.lm_head = (
            None if shape.tie_word_embeddings else nn.Linear(shape.hidden_size, vocab_rows, bias=False)
        )
        # a plain attribute, not a buffer: the loader builds the model on the meta device, then sets it
        self.cos_sin_cache: torch.Tensor | None = None

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn: AttentionMetadata,
        kv_caches: list[KVCache],
    ) -> torch.Tensor:
        """Flattened new tokens of all sequences [T] -> final hidden states [T, hidden]."""
        hidden, residual = self.embed_tokens(input_ids), None
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            hidden, residual = layer(positions, hidden, residual, attn, kv_cache, self.cos_sin_cache)
        return self.norm(hidden, residual)[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits only for the rows that are sampled: the LM head is the largest matmul of a decode."""
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return self.group.gather_vocab(self.ops.linear(hidden, head), self.shape.vocab_size)
