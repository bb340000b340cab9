"""Incremental detokenization of one request's output, with stop strings. The text deltas it returns
concatenate to the decode of the whole output (cut at a stop string), across multi-byte UTF-8
characters split over tokens and byte-fallback tokens.

How (vLLM's offsets): decode a short window of recent ids twice, up to the last emitted token and up to
the newest; the difference is the new text. Text is held back while the window ends inside a character
(it decodes to U+FFFD) and, with stop strings, while its tail could still become the start of one."""

from __future__ import annotations

from engine.serving.tokenizer import TextTokenizer

REPLACEMENT = "\ufffd"  # what a partial UTF-8 sequence decodes to
# prompt ids the window starts with: sentencepiece decodes a word's leading space only after a token
PROMPT_CONTEXT = 5


class IncrementalDetokenizer:
    def __init__(self, tokenizer: TextTokenizer, prompt_token_ids: list[int], stop: list[str]):
        self.tokenizer = tokenizer
        context = list(prompt_token_ids[-PROMPT_CONTEXT:])
        if tokenizer.decode(context).endswith(REPLACEMENT):
            context = []  # a prompt cut inside a character would swallow the output's first bytes
        self.ids = context
        self.prefix_offset, self.read_offset = 0, len(context)
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.text = ""  # output text decoded so far (cut at a stop string once one matched)
        self.sent = 0  # characters of text already returned
        self.stopped = False  # a stop string matched: the request is done

    def add(self, token_ids: list[int]) -> str:
        """New text that is final, after these output tokens (possibly empty)."""
        if self.stopped or not token_ids:
            return ""
        self.ids += token_ids
        self._decode_window(final=False)
        return self._release(final=False)

    def flush(self) -> str:
        """The rest of the text once the output is complete: partial characters decode as U+FFFD."""
        if not self.stopped:
            self._decode_window(final=True)
        return self._release(final=True)

    def _decode_window(self, final: bool) -> None:
        if self.read_offset == len(self.ids):
            return
        decode = self.tokenizer.decode
        prefix_text = decode(self.ids[self.prefix_offset : self.read_offset])
        new_text = decode(self.ids[self.prefix_offset :])
        if len(new_text) <= len(prefix_text) and not final:
            return  # only special tokens or bytes of a character so far
        if new_text.endswith(REPLACEMENT) and not final:
            return
        self._append(new_text[len(prefix_text) :])
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)

    def _append(self, piece: str) -> None:
        # a match can only start where text was still held back: nothing sent ever has to be taken back
        start = max(0, len(self.text) - self.hold)
        self.text += piece
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i != -1]
        if hits:
            self.text, self.stopped = self.text[: min(hits)], True

    def _release(self, final: bool) -> str:
        end = len(self.text) if final or self.stopped else len(self.text) - self.hold
        if end <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent : end], end
        return delta
