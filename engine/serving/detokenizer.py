"""Incremental detokenization of one request's output, with stop strings. The text deltas it returns
concatenate to the decode of the whole output (cut at a stop string), across multi-byte UTF-8
characters split over tokens and byte-fallback tokens.

How: HF tokenizers' DecodeStream (>= 0.21; vLLM's offsets in Rust: a short window of recent ids decoded
up to the last emitted token and up to the newest, the difference the new text, nothing while the window
ends inside a character): 1.0-1.5 us a token where our Python doing the same with two decodes took
3.0-3.7 (synthetic llama3-8b BPE, benchmarks/detokenize_cost.py). The ids it still holds at the end decode
here, the same way, with U+FFFD for an unfinished character. With stop strings, text is also held
while its tail could still become the start of one."""

from __future__ import annotations

from llmbench.engine.serving.tokenizer import TextTokenizer
from tokenizers.decoders import DecodeStream

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
        # where the window of the last emitted piece began and ended: the held ids decode from there
        self.prefix_offset, self.read_offset = 0, len(context)
        # ids one at a time: DecodeStream's prefill ids and lists came after tokenizers 0.21
        self.stream = DecodeStream(skip_special_tokens=True)
        for token in context:
            self.stream.step(tokenizer.tokenizer, token)
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        # with stop strings: the output text decoded so far (cut at a stop string once one matched);
        # without, nothing is ever held back and each piece is returned as it comes
        self.text = ""
        self.sent = 0  # characters of text already returned
        self.stopped = False  # a stop string matched: the request is done

    def add(self, token_ids: list[int]) -> str:
        """New text that is final, after these output tokens (possibly empty)."""
        if self.stopped or not token_ids:
            return ""
        tokenizer, step, ids = self.tokenizer.tokenizer, self.stream.step, self.ids
        pieces = []
        for token in token_ids:
            ids.append(token)
            piece = step(tokenizer, token)
            if piece:  # the stream holds no id any more
                pieces.append(piece)
                self.prefix_offset, self.read_offset = self.read_offset, len(ids)
        if not self.stop:
            return "".join(pieces)
        self._append("".join(pieces))
        return self._release(final=False)

    def flush(self) -> str:
        """The rest of the text once the output is complete: partial characters decode as U+FFFD."""
        if not self.stopped and self.read_offset < len(self.ids):
            decode = self.tokenizer.decode
            prefix_text = decode(self.ids[self.prefix_offset : self.read_offset])
            self._append(decode(self.ids[self.prefix_offset :])[len(prefix_text) :])
        return self._release(final=True)

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
