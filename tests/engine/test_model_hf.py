"""The model against transformers on the same random weights: full-prompt logits of several prompts
flattened into one paged batch, chunked prefill over a cached prefix, and paged decode."""

import random

import pytest
import torch
import transformers
from llmbench.engine.batch import ScheduledBatch, ScheduledSeq
from llmbench.engine.input_batch import prepare_inputs
from llmbench.engine.loader import hf_tensor_names
from llmbench.engine.models.llama import LlamaForCausalLM, rope_cos_sin_cache
from llmbench.engine.models.shape import LlamaShape
from llmbench.engine.request import SamplingParams

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    max_position_embeddings=2048,
    bos_token_id=1,
    eos_token_id=2,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
VARIANTS = {
    "llama": lambda: transformers.LlamaConfig(**TINY, head_dim=16),
    "llama-tied": lambda: transformers.LlamaConfig(**TINY, head_dim=16, tie_word_embeddings=True),
    "llama3-rope": lambda: transformers.LlamaConfig(**TINY, head_dim=16, rope_parameters=LLAMA3_ROPE),
    "qwen2": lambda: transformers.Qwen2Config(**TINY, rms_norm_eps=1e-6),
}


def hf_model(hf_config: transformers.PretrainedConfig, seed: int = 0) -> transformers.PreTrainedModel:
    """A randomly initialized HF model; norms and biases randomized too, so a missing one shows."""
    torch.manual_seed(seed)
    hf_config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
    return model


def ours_from_hf(hf: transformers.PreTrainedModel) -> LlamaForCausalLM:
    shape = LlamaShape.from_hf_config(hf.config.to_dict())
    model = LlamaForCausalLM(shape)
    model.cos_sin_cache = rope_cos_sin_cache(shape, torch.device("cpu"))
    state = hf.state_dict()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.cat([state[s] for s in hf_tensor_names(name)]))
    return model.eval()


def hf_logits(hf: transformers.PreTrainedModel, prompt: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([prompt])).logits[0]


class PagedRun:
    """Runs the model step by step on a paged KV pool whose blocks are handed out in shuffled order."""

    def __init__(self, model: LlamaForCausalLM, block_size: int, num_blocks: int = 128, seed: int = 0):
        s = model.shape
        layout = (num_blocks, block_size, s.num_kv_heads, s.head_dim)
        self.kv_caches = [(torch.zeros(layout), torch.zeros(layout)) for _ in range(s.num_layers)]
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)
        self.model, self.block_size, self.tables = model, block_size, {}

    def step(self, work: dict[int, tuple[list[int], int, int]]) -> list[torch.Tensor]:
        """work: seq_id -> (tokens, num_computed, num_new). Returns each sequence's logits rows."""
        seqs = []
        for seq_id, (tokens, num_computed, num_new) in work.items():
            table = self.tables.setdefault(seq_id, [])
            while len(table) * self.block_size < num_computed + num_new:
                table.append(self.free.pop())
            num_outputs = 1 if num_new == 1 and num_computed else 0  # marks a decode
            seqs.append(
                ScheduledSeq(
                    seq_id, tokens, num_computed, num_new, table, SamplingParams(), True, num_outputs
                )
            )
        batch = ScheduledBatch(seqs)
        inputs = prepare_inputs(batch, self.block_size, torch.device("cpu"))
        with torch.no_grad():
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.attn, self.kv_caches)
            logits = self.model.compute_logits(hidden)
        return list(logits.split([s.num_new for s in seqs]))


def prompts(n: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(rng.randrange(1, 90))] for _ in range(n)]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_full_prompt_logits_match_hf(variant):
    hf = hf_model(VARIANTS[variant]())
    ours = ours_from_hf(hf)
    batch_prompts = prompts(5)
    run = PagedRun(ours, block_size=4)
    logits = run.step({i: (p, 0, len(p)) for i, p in enumerate(batch_prompts)})
    for prompt, got in zip(batch_prompts, logits, strict=True):
        want = hf_logits(hf, prompt)
        assert want.std() > 0.05  # weights large enough that a wrong op would show
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("block_size", [4, 16])
def test_chunked_prefill_and_decode_match_hf(block_size):
    """Prefill in chunks (later chunks attend to the cached prefix), then decode one token at a time,
    two sequences interleaved in each step."""
    hf = hf_model(VARIANTS["qwen2"](), seed=3)
    ours = ours_from_hf(hf)
    a, b = prompts(2, seed=7)[0] + [5] * 40, list(range(10, 70))
    run = PagedRun(ours, block_size)
    got_a, got_b = [], []
    for start, size in ((0, 17), (17, 9), (26, 30)):
        la, lb = run.step({0: (a, start, size), 1: (b, start, size)})
        got_a.append(la)
        got_b.append(lb)
    for pos in range(56, 60):
        la, lb = run.step({0: (a, pos, 1), 1: (b, pos, 1)})
        got_a.append(la)
        got_b.append(lb)
    torch.testing.assert_close(torch.cat(got_a), hf_logits(hf, a[:60]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat(got_b), hf_logits(hf, b[:60]), atol=1e-4, rtol=1e-4)


def test_llama3_rope_scaling_changes_frequencies():
    """The scaled cache differs from the plain one (the HF comparison above then shows it is right)."""
    plain = LlamaShape.from_hf_config(transformers.LlamaConfig(**TINY, head_dim=16).to_dict())
    scaled = LlamaShape.from_hf_config(VARIANTS["llama3-rope"]().to_dict())
    assert scaled.rope_scaling["factor"] == 8.0 and scaled.rope_theta == 500000.0
    assert plain.rope_scaling is None
    assert not torch.allclose(
        rope_cos_sin_cache(scaled, torch.device("cpu")), rope_cos_sin_cache(plain, torch.device("cpu"))
    )


def test_shape_accounting_matches_hf_parameter_count():
    for variant, make in VARIANTS.items():
        hf = hf_model(make())
        shape = LlamaShape.from_hf_config(hf.config.to_dict())
        assert shape.num_params() == sum(p.numel() for p in hf.parameters()), variant
        assert shape.param_bytes(2) == 2 * shape.num_params()
    assert shape.kv_bytes_per_token(2) == 2 * 2 * 2 * 16 * 2  # K and V, 2 layers, 2 KV heads, dim 16
