"""The whole engine (scheduler, paged KV, prefix cache, preemption, model runner) is token-exact with
transformers' greedy generate on the same weights, loaded from an HF-format directory."""

import json

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.execution.kernel_choice import select_ops
from llmbench.engine.execution.kv_pool import KVPool
from llmbench.engine.execution.model_runner import ModelRunner
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq
from llmbench.kernels import reference, triton_ops

from tests.engine.hf_reference import GREEDY, MAX_NEW, engine_for, make_prompts, run


@pytest.mark.parametrize("prefix_caching", [True, False], ids=["prefix", "no-prefix"])
@pytest.mark.parametrize("chunked_prefill", [True, False], ids=["chunked", "whole"])
@pytest.mark.parametrize("block_size", [4, 16])
def test_greedy_tokens_match_hf(checkpoint, block_size, chunked_prefill, prefix_caching):
    path, expected = checkpoint
    engine = engine_for(
        path,
        block_size=block_size,
        chunked_prefill=chunked_prefill,
        prefix_caching=prefix_caching,
        max_num_batched_tokens=32,  # prompts split into chunks and mixed with decodes
    )
    tokens, cached, _ = run(engine, make_prompts(), GREEDY)
    assert tokens == expected
    if prefix_caching:
        assert sum(cached) >= 3 * (36 // block_size * block_size)  # later shared-prefix prompts hit
    else:
        assert sum(cached) == 0


@pytest.mark.parametrize("block_size", [4, 16])
def test_greedy_tokens_match_hf_under_preemption(checkpoint, block_size):
    path, expected = checkpoint
    # room for about two of the longest sequences at a time: running ones are preempted and recomputed
    engine = engine_for(path, block_size=block_size, num_gpu_blocks=112 // block_size + 2)
    tokens, _, preempted = run(engine, make_prompts(), GREEDY)
    assert preempted > 0
    assert tokens == expected


@pytest.mark.slow
@pytest.mark.triton_interpreter
def test_triton_backend_matches_hf(checkpoint):
    """The Triton kernels (interpreted without a GPU) serve the same engine path token-exact: chunked
    prompts mixed with decodes, a cached shared prefix, paged decode."""
    path, expected = checkpoint
    pick = [0, 2, 4, 8]  # shared-prefix prompts (the later ones hit the cache) and a short one
    engine = engine_for(path, "triton", block_size=4, max_num_batched_tokens=32)
    assert engine.executor.model.norm.ops is triton_ops
    tokens, cached, _ = run(engine, [make_prompts()[i] for i in pick], GREEDY)
    assert tokens == [expected[i] for i in pick]
    assert sum(cached) > 0


def test_generate_matches_hf(checkpoint):
    path, expected = checkpoint
    engine = engine_for(path, block_size=16)
    assert engine.generate(make_prompts(), GREEDY) == expected
    assert engine.executor.shape.vocab_size == 512 and engine.executor.max_model_len == 256


def test_seeded_sampling_survives_preemption(checkpoint):
    """Seeded random sampling gives the same tokens whether or not the sequence was preempted and
    recomputed in between."""
    path, greedy = checkpoint
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)
    roomy, _, roomy_preempted = run(engine_for(path, block_size=4), make_prompts(), params)
    tight, _, tight_preempted = run(engine_for(path, block_size=4, num_gpu_blocks=30), make_prompts(), params)
    assert roomy_preempted == 0 and tight_preempted > 0
    assert roomy == tight
    assert roomy[2] == roomy[-2]  # the same prompt with the same seed
    assert roomy != greedy


def test_multi_step_decode_equals_single_steps(checkpoint):
    """num_steps forwards from one schedule, inputs advanced on the device, still give HF's tokens."""
    path, expected = checkpoint
    runner = engine_for(path, block_size=4).executor
    prompts = make_prompts()[:4]
    tables = [list(range(i * 40, i * 40 + 40)) for i in range(len(prompts))]
    prefill = ScheduledBatch(
        [ScheduledSeq(i, p, 0, len(p), tables[i], GREEDY, sample=True) for i, p in enumerate(prompts)]
    )
    (first,) = [f.host.tolist() for f in runner.execute(prefill)]
    seqs = [p + [t] for p, t in zip(prompts, first, strict=True)]
    decode = [ScheduledSeq(i, s, len(s) - 1, 1, tables[i], GREEDY, True, 1) for i, s in enumerate(seqs)]
    multi = torch.stack([f.host for f in runner.execute(ScheduledBatch(decode, num_steps=3))])
    assert multi.shape == (3, len(prompts))
    for i, tokens in enumerate(expected[:4]):
        assert [first[i], *multi[:, i].tolist()] == tokens[:4]


def runner_for(config: EngineConfig) -> ModelRunner:
    return ModelRunner(config, resolve_model_facts(config))


def test_kv_pool_sizing():
    tiny = EngineConfig(model=ModelConfig(preset="tiny", device="cpu"), block_size=16)
    block_bytes = 16 * 2 * 2 * 2 * 16 * 4  # tokens x (K, V) x layers x KV heads x head_dim x fp32
    assert runner_for(tiny).num_blocks == 256 * 2048 * block_bytes // 16 // block_bytes
    tiny.kv_cache_memory_gb = 0.01
    assert runner_for(tiny).num_blocks == int(0.01 * 2**30) // block_bytes
    tiny.num_gpu_blocks = 7
    runner = runner_for(tiny)
    # plus one spare block, the target of CUDA-graph padding rows
    assert runner.num_blocks == 7 and runner.kv_caches[0][0].shape == (8, 16, 2, 16)
    # a device with room for far more (a tiny model on a large GPU) stops at every slot at full length
    tiny.num_gpu_blocks = tiny.kv_cache_memory_gb = None
    tiny.max_num_seqs, tiny.max_model_len = 4, 40
    assert KVPool(tiny, resolve_model_facts(tiny)).num_blocks(free_kv_bytes=10**12) == 4 * 3


@pytest.mark.triton_interpreter
def test_bad_runner_settings():
    with pytest.raises(
        ValueError, match="max_model_len 4096 exceeds the model's max_position_embeddings 2048"
    ):
        runner_for(EngineConfig(model=ModelConfig(preset="tiny", device="cpu"), max_model_len=4096))
    tiny = ModelConfig(preset="tiny", device="cpu")
    with pytest.raises(
        ValueError, match=r"engine.num_gpu_blocks: a KV pool of 1000000000 blocks needs .* free"
    ):
        runner_for(EngineConfig(model=tiny, num_gpu_blocks=10**9))  # 8 TB, within the key's bound
    with pytest.raises(
        ValueError, match="engine.kv_cache_memory_gb: too small for one KV block of 8192 bytes"
    ):
        runner_for(EngineConfig(model=tiny, kv_cache_memory_gb=1e-9))
    cpu = torch.device("cpu")
    assert select_ops("auto", cpu) is reference and select_ops("torch", cpu) is reference
    assert select_ops("triton", cpu) is triton_ops


@pytest.mark.triton_interpreter
def test_triton_backend_needs_a_power_of_two_head_dim(tmp_path):
    """A checkpoint whose heads the Triton kernels cannot tile is refused before any weight is read."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 160,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 256,
        "vocab_size": 512,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = ModelConfig(path=str(tmp_path), dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="power-of-two head dimension, the model's is 80"):
        runner_for(EngineConfig(model=model, attention_backend="triton"))
