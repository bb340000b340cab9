"""The tokenizer a GGUF file describes in its metadata, as a `tokenizers` object that encodes exactly as
transformers' tokenizer for the same file (AutoTokenizer.from_pretrained(dir, gguf_file=...)), and the
chat template the file carries.

Only byte-level BPE vocabularies (tokenizer.ggml.model "gpt2": Llama 3, SmolLM, ...) are built. Text is
split with the Llama 3 pattern for the pre-tokenizer names that use it and with GPT-2's pattern for every
other name, as transformers does: llama.cpp's own pre-tokenizers differ for some names (its "smollm"
splits digits one by one), but the reference the engine is tested against is transformers."""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

# Llama 3's split (digits in runs of at most three, contractions case-insensitive)
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_NAMES = ("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3", "pixtral")

# llama.cpp's token types
_CONTROL, _USER_DEFINED = 3, 4


def gguf_tokenizer(metadata: dict[str, Any]) -> Tokenizer:
    """The file's tokenizer; ValueError names a tokenizer kind that is not built here."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"GGUF tokenizer {kind!r} is not supported (only byte-level BPE, 'gpt2'); "
            "set model.tokenizer to the model's tokenizer.json"
        )
    tokens = metadata["tokenizer.ggml.tokens"]
    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    # a byte-level vocabulary spells every byte as one printable character; a token written in plain
    # text instead is respelled, so BPE finds it
    vocab = {
        (token if set(token) <= spelled else "".join(alphabet[b] for b in token.encode("utf-8"))): i
        for i, token in enumerate(tokens)
    }
    merges = [tuple(m.split(" ", 1)) for m in metadata.get("tokenizer.ggml.merges", [])]
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
    pre = metadata.get("tokenizer.ggml.pre")
    if pre in _LLAMA3_NAMES:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)  # 1: a normal token
    # a control token spelled outside the byte alphabet is a mislabel llama.cpp's converter makes;
    # as a special token it would only ever match literally, so it is left to BPE like transformers does
    tokenizer.add_special_tokens(
        [
            AddedToken(token, normalized=False, special=True)
            for token, kind in zip(tokens, types, strict=True)
            if kind == _CONTROL and set(token) <= spelled
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(token, normalized=False, special=False)
            for token, kind in zip(tokens, types, strict=True)
            if kind == _USER_DEFINED
        ]
    )
    tokenizer.post_processor = _post_processor(metadata, tokens)
    return tokenizer


def gguf_chat_template(metadata: dict[str, Any]) -> str | None:
    """The file's default chat template (tokenizer.chat_template), if it has one."""
    return metadata.get("tokenizer.chat_template")


def _post_processor(metadata: dict[str, Any], tokens: list[str]) -> processors.TemplateProcessing:
    """BOS (and EOS) around the text where the file says the model wants them."""
    bos_id, eos_id = metadata.get("tokenizer.ggml.bos_token_id"), metadata.get("tokenizer.ggml.eos_token_id")
    before = [tokens[bos_id]] if metadata.get("tokenizer.ggml.add_bos_token") and bos_id is not None else []
    after = [tokens[eos_id]] if metadata.get("tokenizer.ggml.add_eos_token") and eos_id is not None else []
    specials = {tokens[i]: i for i in (bos_id, eos_id) if i is not None}
    return processors.TemplateProcessing(
        single=" ".join([*before, "$A", *after]),
        pair=" ".join([*before, "$A", *after, *before, "$B:1", *after]),
        special_tokens=[(t, i) for t, i in specials.items() if t in before + after],
    )


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> character table: printable Latin-1 bytes stand for themselves, the others
    (controls, space, ...) for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    table = {b: chr(b) for b in printable}
    shifted = [b for b in range(256) if b not in table]
    table.update({b: chr(256 + n) for n, b in enumerate(shifted)})
    return table
