"""Synthetic prompts as text for servers that take no token ids (chat, or backend.prompt_format: text).

Decoding random ids and encoding the text again rarely gives back the same count (merges across token
boundaries, normalization), so the text is adjusted until it encodes to exactly as many tokens as the
workload asked for: vLLM's random dataset does the same dance."""

from __future__ import annotations

from pathlib import Path

from llmbench.config import RunConfig

MAX_ROUNDS = 16


class PromptText:
    def __init__(self, config: RunConfig):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(tokenizer_path(config))

    def of_tokens(self, ids: list[int]) -> str:
        """Text that encodes (without special tokens) to exactly len(ids) tokens, starting as ids decode."""
        target = len(ids)
        pool = list(ids)  # tokens to grow a text that came out short, recycled from the prompt itself
        current = list(ids)
        for _ in range(MAX_ROUNDS):
            text = self.tokenizer.decode(current, skip_special_tokens=True)
            encoded = self.tokenizer.encode(text, add_special_tokens=False).ids
            if len(encoded) == target:
                return text
            if len(encoded) > target:
                current = encoded[:target]
            else:
                current = encoded + pool[: target - len(encoded)]
        raise ValueError(f"backend.prompt_format text: no text of exactly {target} tokens found for a prompt")


def tokenizer_path(config: RunConfig) -> str:
    """model.tokenizer, else <model.path>/tokenizer.json (a ValueError names the keys when neither is)."""
    candidates = [config.model.tokenizer]
    if config.model.path:
        candidates.append(str(Path(config.model.path) / "tokenizer.json"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise ValueError("backend.prompt_format text: no tokenizer.json found; set model.tokenizer or model.path")
