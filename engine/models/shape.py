"""The Llama family's dimensions (LlamaShape, with the named presets) and what a forward costs in FLOPs
and bytes per token, which the step accounting and the roofline bound use. Where a model's shape is read
from is engine/loading/source.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LlamaShape:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # only the Llama-3 "llama3" type
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2 has q/k/v biases
    eos_token_id: int = 2
    bos_token_id: int = 1

    @classmethod
    def from_hf_config(cls, cfg: dict) -> LlamaShape:
        """Shape from an HF config.json dict (old `rope_theta`/`rope_scaling` keys or the newer
        `rope_parameters`)."""
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r}: only silu")
        if cfg.get("mlp_bias"):
            raise ValueError("unsupported mlp_bias=true")
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope_type = rope.pop("rope_type", rope.pop("type", "default"))
        rope_theta = rope.pop("rope_theta", cfg.get("rope_theta", 10000.0))
        if rope_type not in ("default", "llama3"):
            raise ValueError(f"unsupported rope scaling type {rope_type!r}: only llama3")
        num_heads = cfg["num_attention_heads"]
        eos, bos = cfg.get("eos_token_id"), cfg.get("bos_token_id")
        return cls(
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=float(rope_theta),
            rope_scaling={"rope_type": "llama3", **rope} if rope_type == "llama3" else None,
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", cfg.get("model_type") == "qwen2"),
            # instruct checkpoints list several EOS ids; the first is the end-of-text token
            eos_token_id=(eos[0] if isinstance(eos, list) else eos) if eos is not None else -1,
            bos_token_id=(bos[0] if isinstance(bos, list) else bos) if bos is not None else -1,
        )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def num_params(self) -> int:
        attn = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        layer = attn + mlp + 2 * self.hidden_size
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + embeddings + self.hidden_size

    def param_bytes(self, dtype_bytes: int = 2) -> int:
        return self.num_params() * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.num_layers * self.kv_size * dtype_bytes

    def forward_flops(self, num_tokens: int, context_len: int, num_logits: int | None = None) -> int:
        """Matmul FLOPs of one forward over num_tokens new tokens that each attend to context_len
        keys on average; the LM head runs on num_logits rows (default: every token)."""
        matmul_params = self.num_params() - self.vocab_size * self.hidden_size
        if not self.tie_word_embeddings:
            matmul_params -= self.vocab_size * self.hidden_size  # the head is counted separately
        head = 2 * (num_tokens if num_logits is None else num_logits) * self.vocab_size * self.hidden_size
        attention = 4 * self.num_layers * self.q_size * num_tokens * context_len  # QK^T and PV
        return 2 * num_tokens * matmul_params + head + attention


# Llama 3.1 context extension (8k -> 128k), shared by the 8B and 70B checkpoints
_LLAMA31_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# shapes of the public checkpoints (their config.json), so a preset runs at the real cost with random weights
PRESETS: dict[str, LlamaShape] = {
    "tiny": LlamaShape(
        hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128,
        vocab_size=512, max_position_embeddings=2048, eos_token_id=2, bos_token_id=1,
    ),
    "llama2-7b": LlamaShape(
        hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, intermediate_size=11008,
        vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=4096,
        eos_token_id=2, bos_token_id=1,
    ),
    "llama3-8b": LlamaShape(
        hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
        vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=_LLAMA31_ROPE,
        max_position_embeddings=131072, eos_token_id=128001, bos_token_id=128000,
    ),
    "llama3-70b": LlamaShape(
        hidden_size=8192, num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128, intermediate_size=28672,
        vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=_LLAMA31_ROPE,
        max_position_embeddings=131072, eos_token_id=128001, bos_token_id=128000,
    ),
    "qwen2-7b": LlamaShape(
        hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128, intermediate_size=18944,
        vocab_size=152064, rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=131072,
        attention_bias=True, eos_token_id=151643, bos_token_id=151643,
    ),
}  # fmt: skip
