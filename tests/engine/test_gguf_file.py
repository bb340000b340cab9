"""The GGUF reader on files written here with the gguf package: every supported storage type dequantizes
as transformers' own torch implementation does, a Llama file reads back in HF's layout (llama.cpp's
rotary row order undone), and a file the engine cannot run is refused naming what is wrong."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf not installed (pip install 'llmbench[real]')")

from llmbench.engine.loading.gguf_file import SUPPORTED_TYPES, GGUFError, GGUFFile  # noqa: E402
from llmbench.engine.loading.gguf_llama import GGUFLlama  # noqa: E402

QUANTIZED = [t for t in SUPPORTED_TYPES if t not in ("F32", "F16", "BF16")]
HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 256, 4, 2, 256, 256  # rows of 256 fill the K-quant blocks
HEAD_DIM = HIDDEN // HEADS


def random_blocks(type_name: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random bytes in the type's block layout; every fp16 scale in it finite: the scales sit at even
    offsets, and clearing bit 6 of each odd byte keeps an fp16's exponent off all-ones."""
    qtype = gguf.GGMLQuantizationType[type_name]
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    data = np.random.default_rng(seed).integers(0, 256, (rows, cols // block_elems * block_bytes), np.uint8)
    data[:, 1::2] &= 0xBF
    return data


def write(path, tensors: dict, metadata=None, arch: str = "llama") -> None:
    """tensors: name -> (storage type, float32 values or raw block bytes)."""
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in (metadata or {}).items():
        add = writer.add_string if isinstance(value, str) else writer.add_uint32
        (writer.add_float32 if isinstance(value, float) else add)(key, value)
    for name, (type_name, values) in tensors.items():
        qtype = gguf.GGMLQuantizationType[type_name]
        if type_name in ("F32", "F16"):
            writer.add_tensor(name, values.astype(np.float32 if type_name == "F32" else np.float16))
        elif type_name == "BF16":
            writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, values, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_each_quantized_type_dequantizes_as_transformers_does(tmp_path, type_name):
    dequant = pytest.importorskip("transformers.integrations.gguf.dequant", reason="transformers >= 5.2")
    import torch

    blocks = random_blocks(type_name, 4, 512)
    write(tmp_path / "t.gguf", {"t": (type_name, blocks)})
    ours = GGUFFile(tmp_path / "t.gguf").read("t")
    qtype = gguf.GGMLQuantizationType[type_name]
    try:
        theirs = dequant.dequantize(torch.from_numpy(blocks.reshape(-1)), int(qtype)).reshape(4, 512).numpy()
    except ValueError as e:  # older releases (the GPU image's 5.17) take only Q8_0 and the K types
        pytest.skip(f"this transformers cannot dequantize {type_name}: {e}")
    assert ours.shape == (4, 512) and ours.dtype == np.float32
    # two implementations, one rounding each of d*q(+m) in float32: a few units in the last place
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6 * np.abs(theirs).max())
    assert np.abs(theirs).max() > 0


@pytest.mark.parametrize("type_name", ["F32", "F16", "BF16"])
def test_float_types_read_exactly(tmp_path, type_name):
    values = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    write(tmp_path / "t.gguf", {"t": (type_name, values)})
    expected = {
        "F32": values,
        "F16": values.astype(np.float16).astype(np.float32),
        "BF16": gguf.quants.dequantize(gguf.quants.quantize(values, gguf.GGMLQuantizationType.BF16), 30),
    }[type_name]
    assert np.array_equal(GGUFFile(tmp_path / "t.gguf").read("t"), expected)


def llama_metadata(**overrides) -> dict:
    return {
        "llama.block_count": 1,
        "llama.context_length": 512,
        "llama.vocab_size": VOCAB,
        "llama.embedding_length": HIDDEN,
        "llama.feed_forward_length": FFN,
        "llama.attention.head_count": HEADS,
        "llama.attention.head_count_kv": KV_HEADS,
        "llama.attention.layer_norm_rms_epsilon": 1e-6,
        "llama.rope.freq_base": 50000.0,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        **overrides,
    }


def llamacpp_order(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: each head's two rotary halves interleaved row by row."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def hf_weights(seed: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {
        "model.embed_tokens.weight": (VOCAB, HIDDEN),
        "model.norm.weight": (HIDDEN,),
        "model.layers.0.input_layernorm.weight": (HIDDEN,),
        "model.layers.0.post_attention_layernorm.weight": (HIDDEN,),
        "model.layers.0.self_attn.q_proj.weight": (HIDDEN, HIDDEN),
        "model.layers.0.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        "model.layers.0.mlp.gate_proj.weight": (FFN, HIDDEN),
        "model.layers.0.mlp.up_proj.weight": (FFN, HIDDEN),
        "model.layers.0.mlp.down_proj.weight": (HIDDEN, FFN),
    }
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def gguf_names(hf: dict[str, np.ndarray]) -> dict[str, tuple[str, np.ndarray]]:
    """The HF weights under GGUF names, float32, q and k in llama.cpp's order."""
    layer = "model.layers.0."
    rename = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        f"{layer}input_layernorm.weight": "blk.0.attn_norm.weight",
        f"{layer}post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
        f"{layer}self_attn.q_proj.weight": "blk.0.attn_q.weight",
        f"{layer}self_attn.k_proj.weight": "blk.0.attn_k.weight",
        f"{layer}self_attn.v_proj.weight": "blk.0.attn_v.weight",
        f"{layer}self_attn.o_proj.weight": "blk.0.attn_output.weight",
        f"{layer}mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
        f"{layer}mlp.up_proj.weight": "blk.0.ffn_up.weight",
        f"{layer}mlp.down_proj.weight": "blk.0.ffn_down.weight",
    }
    out = {}
    for name, value in hf.items():
        if name.endswith("q_proj.weight"):
            value = llamacpp_order(value, HEADS)
        elif name.endswith("k_proj.weight"):
            value = llamacpp_order(value, KV_HEADS)
        out[rename[name]] = ("F32", value)
    return out


def test_a_llama_file_reads_back_in_hf_layout(tmp_path):
    hf = hf_weights()
    write(tmp_path / "m.gguf", gguf_names(hf), llama_metadata())
    model = GGUFLlama(str(tmp_path / "m.gguf"))
    assert set(model.names) == set(hf)
    for name, value in hf.items():
        assert np.array_equal(model.tensor(name), value), name
    shape = model.shape
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads) == (256, 1, 4, 2)
    assert (shape.head_dim, shape.intermediate_size, shape.vocab_size) == (64, 256, 256)
    assert shape.rms_norm_eps == pytest.approx(1e-6) and shape.rope_theta == 50000.0
    assert shape.tie_word_embeddings and shape.max_position_embeddings == 512
    assert (shape.bos_token_id, shape.eos_token_id) == (1, 2)


def test_a_mixed_type_llama_file_reads_as_transformers_loads_it(tmp_path):
    pytest.importorskip("accelerate", reason="transformers reads a GGUF only with accelerate installed")
    import torch
    import transformers

    tensors = gguf_names(hf_weights())
    # every quantized type on some matrix, float types on the norms
    matrices = [n for n, (_, v) in tensors.items() if v.ndim == 2]
    for name, type_name in zip(matrices, QUANTIZED, strict=False):
        tensors[name] = (type_name, random_blocks(type_name, *tensors[name][1].shape))
    tensors["blk.0.attn_norm.weight"] = ("F16", tensors["blk.0.attn_norm.weight"][1])
    tensors["blk.0.ffn_norm.weight"] = ("BF16", tensors["blk.0.ffn_norm.weight"][1])
    write(tmp_path / "m.gguf", tensors, llama_metadata())
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="m.gguf", dtype=torch.float32
    ).state_dict()
    model = GGUFLlama(str(tmp_path / "m.gguf"))
    for name in model.names:
        assert torch.equal(torch.from_numpy(model.tensor(name)), reference[name]), name


@pytest.mark.parametrize(
    "change, message",
    [
        ({"arch": "gpt2"}, "architecture 'gpt2' is not supported (only 'llama')"),
        ({"type": "TQ2_0"}, "tensor blk.0.attn_q.weight has type TQ2_0, not supported"),
        ({"extra": "blk.0.attn_q_norm.weight"}, "tensor blk.0.attn_q_norm.weight has no place in a Llama"),
        ({"metadata": {"llama.rope.scaling.type": "yarn"}}, "rope scaling 'yarn' is not supported"),
    ],
)
def test_files_the_engine_cannot_run_are_refused_by_name(tmp_path, change, message):
    tensors = gguf_names(hf_weights())
    if "type" in change:
        tensors["blk.0.attn_q.weight"] = (change["type"], random_blocks(change["type"], HIDDEN, HIDDEN))
    if "extra" in change:
        tensors[change["extra"]] = ("F32", np.ones(HEAD_DIM, np.float32))
    metadata = llama_metadata(**change.get("metadata", {}))
    arch = change.get("arch", "llama")
    if arch != "llama":
        metadata = {k.replace("llama.", f"{arch}."): v for k, v in metadata.items()}
    write(tmp_path / "m.gguf", tensors, metadata, arch)
    with pytest.raises(GGUFError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GGUFLlama(str(tmp_path / "m.gguf"))


def test_files_that_are_not_whole_ggufs(tmp_path):
    (tmp_path / "text.gguf").write_text("hello, not a model")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        GGUFFile(tmp_path / "text.gguf")
    write(tmp_path / "m.gguf", gguf_names(hf_weights()), llama_metadata())
    whole = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(GGUFError, match="runs past the end of the file"):
        GGUFFile(tmp_path / "cut.gguf")
    (tmp_path / "header.gguf").write_bytes(whole[:100])
    with pytest.raises(GGUFError, match="truncated or corrupt GGUF header"):
        GGUFFile(tmp_path / "header.gguf")
    with pytest.raises(GGUFError, match="cannot read"):
        GGUFFile(tmp_path / "absent.gguf")
