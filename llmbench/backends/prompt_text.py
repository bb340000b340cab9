"""Synthetic prompts as text for servers that take no token ids (chat, or backend.prompt_format: text).

Decoding random ids and encoding the text again rarely gives back the same count (merges across token
boundaries, normalization), so the text is adjusted until it encodes to exactly as many tokens as the
workload asked for: vLLM's random dataset does the same dance."""

from __future__ import annotations

from llmbench.config.schema import RunConfig
from llmbench.engine.loading.source import model_shape

MAX_ROUNDS = 64


class PromptText:
    def __init__(self, config: RunConfig):
        # the tokenizer llmbench serve uses: model.tokenizer, <model.path>/tokenizer.json, or for a preset
        # the synthetic byte-level BPE of its vocabulary
        from llmbench.engine.serving.tokenizer import load_tokenizer

        self.tokenizer = load_tokenizer(config.model, model_shape(config.model)).tokenizer
        self._fillers: list[str] = []

    def of_tokens(self, ids: list[int]) -> tuple[str, list[int]]:
        """Text that encodes (without special tokens) to exactly len(ids) tokens, as near to the ids'
        own decode as the tokenizer allows (too long, it is cut; too short, whole tokens are appended),
        and the ids it encodes to."""
        target = len(ids)
        text = self._decode(ids)
        for round_ in range(MAX_ROUNDS):
            encoded = self.tokenizer.encode(text, add_special_tokens=False).ids
            if len(encoded) == target:
                return text, encoded
            if len(encoded) > target:
                cut = self._decode(encoded[:target])
                # a cut inside a multi-byte character decodes to a longer replacement: drop characters
                text = cut if len(cut) < len(text) else text[:-1]
            else:
                fillers = self._safe_fillers()
                text += "".join(fillers[(round_ + i) % len(fillers)] for i in range(target - len(encoded)))
        raise ValueError(f"backend.prompt_format text: no text of exactly {target} tokens found for a prompt")

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _safe_fillers(self) -> list[str]:
        """Texts of single tokens that encode back to themselves alone (no partial UTF-8 bytes)."""
        if not self._fillers:
            for token in range(self.tokenizer.get_vocab_size()):
                text = self._decode([token])
                if text.strip() and self.tokenizer.encode(text, add_special_tokens=False).ids == [token]:
                    self._fillers.append(text)
                    if len(self._fillers) == 64:
                        break
        return self._fillers
