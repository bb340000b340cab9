import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llmbench.engine.config import ModelConfig
from llmbench.engine.models.shape import PRESETS, LlamaShape
from llmbench.engine.serving import synthetic_bpe
from llmbench.engine.serving.detokenizer import IncrementalDetokenizer
from llmbench.engine.serving.tokenizer import TextTokenizer, load_tokenizer
from tokenizers import Tokenizer, decoders, models, normalizers

from tests.engine.serving.chat_templates import LLAMA3_STYLE_TEMPLATE

MULTILINGUAL = [
    "Hello, world! naïve café, Straße, Ærø",
    "Привет, как дела? Всё хорошо.",
    "你好，世界。今日は良い天気ですね。안녕하세요",
    "مرحبا بالعالم — שלום עולם — नमस्ते दुनिया",
    "emoji 🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and 🫠",
    "math ∑∫√∞ ≠ ≤ ≥, music 𝄞, old 𐍈",
]


@pytest.fixture(scope="module")
def tiny() -> TextTokenizer:
    return load_tokenizer(ModelConfig(preset="tiny"), PRESETS["tiny"])


@pytest.fixture(scope="module")
def byte_fallback() -> TextTokenizer:
    """A sentencepiece-style BPE (Llama-2's kind): characters it never saw become <0xNN> byte tokens."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in ["▁", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "hell", "hello", "▁w", "▁wo"]:
        vocab[piece] = len(vocab)
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("▁", "w"), ("▁w", "o")]
    tokenizer = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    shape = LlamaShape(16, 1, 1, 1, 16, 16, tokenizer.get_vocab_size(), eos_token_id=2, bos_token_id=1)
    return TextTokenizer(tokenizer, shape)


def stream(tokenizer: TextTokenizer, ids: list[int], chunks: list[int], stop: list[str] = ()) -> list[str]:
    """The deltas of ids fed in chunks of the given sizes (cycled), then the flush."""
    detokenizer = IncrementalDetokenizer(tokenizer, [1], list(stop))
    deltas, i = [], 0
    while i < len(ids):
        size = chunks[len(deltas) % len(chunks)]
        deltas.append(detokenizer.add(ids[i : i + size]))
        i += size
    return [*deltas, detokenizer.flush()]


@pytest.mark.parametrize("text", MULTILINGUAL)
@pytest.mark.parametrize("tokenizer_name", ["tiny", "byte_fallback"])
def test_streamed_deltas_concatenate_to_the_text(text, tokenizer_name, request):
    tokenizer = request.getfixturevalue(tokenizer_name)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text  # round trip: byte-level and byte fallback lose nothing
    for chunks in ([1], [2, 3], [len(ids)]):
        deltas = stream(tokenizer, ids, chunks)
        assert "".join(deltas) == text
        assert all("\ufffd" not in d for d in deltas)  # no half character was ever sent


def test_byte_fallback_characters_span_tokens(byte_fallback):
    ids = byte_fallback.encode("hello 🎉", add_special_tokens=False)
    pieces = [byte_fallback.tokenizer.id_to_token(i) for i in ids]
    assert pieces[-4:] == ["<0xF0>", "<0x9F>", "<0x8E>", "<0x89>"]  # the emoji is four byte tokens
    assert stream(byte_fallback, ids, [1])[-5:] == ["", "", "", "🎉", ""]


def test_random_ids_stream_as_their_whole_decode(tiny):
    rng = random.Random(0)
    for _ in range(200):  # random model output: invalid UTF-8, specials, anything
        ids = [rng.randrange(tiny.vocab_size) for _ in range(rng.randint(1, 40))]
        assert "".join(stream(tiny, ids, [rng.randint(1, 4)])) == tiny.decode(ids)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=60),
    stop_at=st.integers(0, 59),
    stop_len=st.integers(1, 6),
    chunk=st.integers(1, 4),
)
def test_a_stop_string_never_leaks(tiny, text, stop_at, stop_len, chunk):
    stop = text[stop_at % len(text) :][:stop_len]
    ids = tiny.encode(text, add_special_tokens=False)
    full = tiny.decode(ids)
    deltas = stream(tiny, ids, [chunk], [stop])
    expected = full[: full.find(stop)] if stop in full else full
    assert "".join(deltas) == expected
    sent = ""
    for delta in deltas:
        sent += delta
        assert stop not in sent


def test_the_earliest_of_several_stop_strings_wins(tiny):
    ids = tiny.encode("one two three four", add_special_tokens=False)
    assert "".join(stream(tiny, ids, [1], ["four", "two"])) == "one "


def test_the_synthetic_tokenizer_has_the_preset_vocabulary(tiny):
    assert tiny.tokenizer.get_vocab_size() == 512
    assert (tiny.bos_token, tiny.eos_token) == ("<|begin_of_text|>", "<|end_of_text|>")
    assert tiny.tokenizer.token_to_id(tiny.eos_token) == PRESETS["tiny"].eos_token_id == 2
    assert tiny.encode("hi")[0] == 1  # BOS first, as Llama's tokenizers add it
    assert tiny.decode([1, *tiny.encode("hi", add_special_tokens=False), 2]) == "hi"


def test_a_llama3_layout_puts_special_tokens_last(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic_bpe, "CACHE_DIR", tmp_path)
    tokenizer = synthetic_bpe.synthetic_tokenizer(1000, bos_token_id=900, eos_token_id=901)
    assert tokenizer.get_vocab_size() == 1000
    assert tokenizer.id_to_token(900) == synthetic_bpe.BOS and tokenizer.id_to_token(901) == synthetic_bpe.EOS
    assert tokenizer.id_to_token(999) == "<|reserved_special_token_99|>"
    assert tokenizer.id_to_token(899) not in tokenizer.get_added_tokens_decoder()  # a BPE merge
    again = synthetic_bpe.synthetic_tokenizer(1000, 900, 901)  # from the cache: the same tokenizer
    assert again.get_vocab() == tokenizer.get_vocab() and len(list(tmp_path.iterdir())) == 1


def test_a_model_directory_without_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=f"no tokenizer at {tmp_path}/tokenizer.json"):
        load_tokenizer(ModelConfig(path=str(tmp_path)), PRESETS["tiny"])


def test_a_model_directory_brings_its_tokenizer_and_chat_template(tiny, tmp_path):
    from llmbench.engine.serving.inputs import BadRequest, chat_prompt
    from llmbench.engine.serving.protocol import ChatCompletionRequest

    tiny.tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": LLAMA3_STYLE_TEMPLATE}))
    tokenizer = load_tokenizer(ModelConfig(path=str(tmp_path)), PRESETS["tiny"])
    assert tokenizer.has_chat_template
    assert tokenizer.render_chat([{"role": "user", "content": "hi"}]) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    body = ChatCompletionRequest(messages=[{"role": "robot", "content": "hi"}])
    with pytest.raises(BadRequest, match="messages: unknown role robot"):
        chat_prompt(body.messages, tokenizer)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0].name.x }}"}))
    strict = load_tokenizer(ModelConfig(path=str(tmp_path)), PRESETS["tiny"])
    with pytest.raises(
        BadRequest, match="messages: the chat template failed: 'dict object' has no attribute"
    ):
        chat_prompt(body.messages, strict)
