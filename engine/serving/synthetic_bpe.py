"""A byte-level BPE tokenizer for presets with random weights, which ship no tokenizer: trained with HF
`tokenizers` on a generated corpus, so it is the same on every machine, and cached under
~/.cache/llmbench/tokenizers. Its vocabulary is exactly the preset's, with BOS and EOS at the preset's ids,
and it decodes like a real byte-level BPE (GPT-2 / Llama-3 style): every id maps to bytes, multi-byte
characters span tokens, so detokenizing random model output costs what a real tokenizer's would."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

logger = logging.getLogger(__name__)

VERSION = 1  # bump when the corpus or the training changes: cached files are keyed by it
CACHE_DIR = Path(os.environ.get("LLMBENCH_CACHE", Path.home() / ".cache" / "llmbench")) / "tokenizers"
WORDS_PER_TOKEN = 16  # corpus size per vocabulary entry: enough distinct pairs for every merge
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def synthetic_tokenizer(vocab_size: int, bos_token_id: int, eos_token_id: int) -> Tokenizer:
    """The cached tokenizer for this vocabulary, trained on first use (about 35 s at 128k on 2 cores)."""
    path = CACHE_DIR / f"bpe-v{VERSION}-{vocab_size}-{bos_token_id}-{eos_token_id}.json"
    if path.exists():
        return Tokenizer.from_file(str(path))
    logger.info("training a %d-token byte-level BPE tokenizer (cached in %s)", vocab_size, path)
    tokenizer = _train(vocab_size, bos_token_id, eos_token_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    tokenizer.save(str(partial))
    os.replace(partial, path)  # two servers starting at once both write whole files
    return tokenizer


def _special_names(ids: range, bos_token_id: int, eos_token_id: int) -> list[str]:
    named = {bos_token_id: BOS, eos_token_id: EOS}
    return [named.get(i, f"<|reserved_special_token_{n}|>") for n, i in enumerate(ids)]


def _train(vocab_size: int, bos_token_id: int, eos_token_id: int) -> Tokenizer:
    specials = [i for i in (bos_token_id, eos_token_id) if i >= 0]
    first, last = min(specials, default=vocab_size), max(specials, default=-1)
    if last < 256:
        # Llama-2 style: the special tokens lead, the BPE fills the rest
        leading, trailing, bpe_size = range(last + 1), range(0), vocab_size
    else:
        # Llama-3 style: the BPE first, the special tokens at the end of the vocabulary
        leading, trailing, bpe_size = range(0), range(first, vocab_size), first
    if bpe_size - len(leading) < 256:
        raise ValueError(f"a byte-level BPE needs room for 256 byte tokens; vocab_size is {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_size,
        special_tokens=_special_names(leading, bos_token_id, eos_token_id),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(bpe_size * WORDS_PER_TOKEN), trainer)
    tokenizer.add_special_tokens(_special_names(trailing, bos_token_id, eos_token_id))
    if tokenizer.get_vocab_size() != vocab_size:
        raise ValueError(f"synthetic tokenizer has {tokenizer.get_vocab_size()} tokens, wanted {vocab_size}")
    if bos_token_id >= 0:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_token_id)]
        )
    return tokenizer


def _corpus(num_words: int, seed: int = 0) -> list[str]:
    """Lines of made-up words: mostly Latin syllables, some Cyrillic, CJK and emoji, so merges include
    two-, three- and four-byte characters as a multilingual tokenizer's do."""
    rng = random.Random(seed)
    latin = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + ["th", "ch", "sh", "qu", "ing", "er"]
    cyrillic = [a + b for a in "бвгдзклмнпрст" for b in "аеиоуя"]
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 600)]
    emoji = [chr(c) for c in range(0x1F600, 0x1F650)]
    words = []
    for _ in range(num_words):
        r = rng.random()
        if r < 0.75:
            words.append("".join(rng.choices(latin, k=rng.randint(1, 5))))
        elif r < 0.88:
            words.append("".join(rng.choices(cyrillic, k=rng.randint(1, 4))))
        elif r < 0.97:
            words.append("".join(rng.choices(cjk, k=rng.randint(1, 3))))
        else:
            words.append(rng.choice(emoji))
    return [" ".join(words[i : i + 20]) + "." for i in range(0, len(words), 20)]
