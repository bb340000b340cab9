"""Loading HF-format directories (single and sharded safetensors) and presets; clear errors for bad input."""

import json

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.loading.loader import load_model
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.loading.source import model_shape
from llmbench.engine.models.shape import PRESETS
from safetensors.torch import load_file, save_file

from tests.engine.hf_reference import VARIANTS, PagedRun, hf_logits, hf_model, prompts


def load_config(model: ModelConfig):
    return load_model(model, resolve_model_facts(EngineConfig(model=model)))


def load(path):
    return load_config(ModelConfig(path=str(path), dtype="float32", device="cpu"))


def assert_same_logits(ours, hf):
    batch_prompts = prompts(3, seed=5)
    logits = PagedRun(ours, block_size=16).step({i: (p, 0, len(p)) for i, p in enumerate(batch_prompts)})
    for prompt, got in zip(batch_prompts, logits, strict=True):
        torch.testing.assert_close(got, hf_logits(hf, prompt), atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory):
    hf = hf_model(VARIANTS["llama"](), seed=11)
    path = tmp_path_factory.mktemp("llama")
    hf.save_pretrained(path)
    return hf, path


@pytest.mark.parametrize("variant", ["llama", "qwen2", "llama-tied"])
def test_save_pretrained_dir_loads_with_hf_logits(variant, tmp_path):
    hf = hf_model(VARIANTS[variant](), seed=2)
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert_same_logits(load(tmp_path), hf)


def test_sharded_checkpoint_loads(tmp_path):
    hf = hf_model(VARIANTS["qwen2"](), seed=4)
    hf.save_pretrained(tmp_path, max_shard_size="50KB")
    assert len(list(tmp_path.glob("*.safetensors"))) > 3
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert_same_logits(load(tmp_path), hf)


def test_dtype_and_shape_come_from_the_directory(saved_llama):
    hf, path = saved_llama
    model = load_config(ModelConfig(path=str(path), dtype="bfloat16", device="cpu"))
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.shape.num_kv_heads == 2 and model.shape.vocab_size == 512
    assert not any(p.requires_grad for p in model.parameters())


def test_presets_are_seeded():
    a, b, c = (load_config(ModelConfig(preset="tiny", device="cpu", seed=s)) for s in (0, 0, 1))
    assert torch.equal(a.layers[1].mlp.down_proj.weight, b.layers[1].mlp.down_proj.weight)
    assert not torch.equal(a.layers[1].mlp.down_proj.weight, c.layers[1].mlp.down_proj.weight)
    assert a.embed_tokens.weight.dtype == torch.float32  # auto on CPU
    assert abs(a.embed_tokens.weight.std().item() - 0.02) < 0.002
    assert torch.equal(a.norm.weight, torch.ones(64))


def test_model_shape_reads_the_directory_over_the_preset_without_weights(saved_llama, tmp_path):
    (tmp_path / "config.json").write_text((saved_llama[1] / "config.json").read_text())
    shape = model_shape(ModelConfig(preset="llama3-8b", path=str(tmp_path)))
    assert (shape.num_kv_heads, shape.vocab_size) == (2, 512)
    assert model_shape(ModelConfig(preset="llama3-8b")) is PRESETS["llama3-8b"]


def test_unknown_preset_lists_presets():
    with pytest.raises(ValueError, match="unknown model preset 'gpt5'.*tiny.*llama3-8b"):
        load_config(ModelConfig(preset="gpt5", device="cpu"))


def test_missing_directory(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        load(tmp_path / "nope")


def test_missing_config(tmp_path):
    with pytest.raises(ValueError, match="config.json not found"):
        load(tmp_path)


def test_corrupt_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load(tmp_path)


def test_unsupported_architecture(saved_llama, tmp_path):
    config = json.loads((saved_llama[1] / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unsupported architecture.*GPT2LMHeadModel"):
        load(tmp_path)


def test_no_weights(saved_llama, tmp_path):
    (tmp_path / "config.json").write_text((saved_llama[1] / "config.json").read_text())
    with pytest.raises(ValueError, match="no \\*.safetensors weights found"):
        load(tmp_path)


def test_missing_tensor_is_named(saved_llama, tmp_path):
    (tmp_path / "config.json").write_text((saved_llama[1] / "config.json").read_text())
    tensors = load_file(saved_llama[1] / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="no tensor 'model.layers.1.self_attn.k_proj.weight'"):
        load(tmp_path)


def test_corrupt_weights_file(saved_llama, tmp_path):
    (tmp_path / "config.json").write_text((saved_llama[1] / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        load(tmp_path)


def test_wrong_tensor_shape_is_named(saved_llama, tmp_path):
    (tmp_path / "config.json").write_text((saved_llama[1] / "config.json").read_text())
    tensors = load_file(saved_llama[1] / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(32)
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="tensor for norm.weight has shape \\(32,\\), expected \\(64,\\)"):
        load(tmp_path)
