"""The model against transformers on the same random weights: full-prompt logits of several prompts
flattened into one paged batch, chunked prefill over a cached prefix, and paged decode."""

import pytest
import torch
import transformers
from llmbench.engine.loading.loader import hf_tensor_names
from llmbench.engine.models.llama import LlamaForCausalLM, rope_cos_sin_cache
from llmbench.engine.models.shape import LlamaShape

from tests.engine.hf_reference import HF_TINY, VARIANTS, PagedRun, hf_logits, hf_model, prompts


def ours_from_hf(hf: transformers.PreTrainedModel) -> LlamaForCausalLM:
    shape = LlamaShape.from_hf_config(hf.config.to_dict())
    model = LlamaForCausalLM(shape)
    model.cos_sin_cache = rope_cos_sin_cache(shape, torch.device("cpu"))
    state = hf.state_dict()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.cat([state[s] for s in hf_tensor_names(name)]))
    return model.eval()


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
    plain = LlamaShape.from_hf_config(transformers.LlamaConfig(**HF_TINY, head_dim=16).to_dict())
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
