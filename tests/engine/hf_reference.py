"""The transformers reference the engine is checked against: tiny HF configs of each supported family,
randomly initialized HF models and their logits, our model run step by step on a paged pool, and a
saved checkpoint with its greedy continuations, run through the whole engine."""

from __future__ import annotations

import random
from pathlib import Path

import torch
import transformers
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.input_batch import prepare_inputs
from llmbench.engine.models.llama import LlamaForCausalLM
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq
from llmbench.engine.scheduling.check import assert_engine_empty

HF_TINY = dict(
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
    "llama": lambda: transformers.LlamaConfig(**HF_TINY, head_dim=16),
    "llama-tied": lambda: transformers.LlamaConfig(**HF_TINY, head_dim=16, tie_word_embeddings=True),
    "llama3-rope": lambda: transformers.LlamaConfig(**HF_TINY, head_dim=16, rope_parameters=LLAMA3_ROPE),
    "qwen2": lambda: transformers.Qwen2Config(**HF_TINY, rms_norm_eps=1e-6),
}
MAX_NEW = 20
GREEDY = SamplingParams(max_tokens=MAX_NEW, ignore_eos=True)


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


def make_prompts() -> list[list[int]]:
    """Ten prompts of different lengths; five share a 37-token prefix, one repeats another exactly."""
    rng = random.Random(0)
    shared = [rng.randrange(3, 512) for _ in range(37)]
    tails = [[rng.randrange(3, 512) for _ in range(n)] for n in (1, 6, 19, 40)]
    others = [[rng.randrange(3, 512) for _ in range(n)] for n in (1, 3, 12, 29)]
    prompts = [shared + t for t in tails] + others + [shared + tails[2]]
    return prompts + [shared]


def save_checkpoint(path: Path) -> list[list[int]]:
    """An HF model saved to path, and its greedy continuations of every prompt of make_prompts."""
    hf = hf_model(VARIANTS["llama"](), seed=0)
    hf.generation_config.eos_token_id = None  # run to max_new_tokens, as ignore_eos does
    hf.save_pretrained(path)
    expected = []
    with torch.no_grad():
        for prompt in make_prompts():
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=0)
            expected.append(out[0, len(prompt) :].tolist())
    return expected


def engine_for(path, attention_backend: str = "torch", **engine_kwargs) -> LLMEngine:
    model = ModelConfig(path=str(path), dtype="float32", device="cpu", seed=0)
    return LLMEngine(
        EngineConfig(model=model, max_model_len=256, attention_backend=attention_backend, **engine_kwargs)
    )


def run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> tuple[list, list, int]:
    """All prompts submitted at once, stepped to completion: (tokens, cached tokens, preemptions)."""
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params)
    tokens, cached = [None] * len(prompts), [0] * len(prompts)
    while engine.has_unfinished():
        for output in engine.step():
            if output.finished:
                assert output.error is None, output.error
                tokens[int(output.request_id)] = output.token_ids
                cached[int(output.request_id)] = output.num_cached_tokens
    preempted = sum(r.num_preempted for r in engine.drain_step_records())
    assert_engine_empty(engine)
    return tokens, cached, preempted
