"""One streamed OpenAI completion read chunk by chunk: what each `data:` event carries, and the
finished output at the stream's end. The counting is vLLM's benchmark client's: a chunk with text is
one arrival however many tokens it carries (as many as its `token_ids` list, one without), the first
is the first token, and the output token count is the server's `usage` (tokens no chunk showed, say
ones whose text a detokenizer held back, join the last chunk). A chat delta's `reasoning_content`
(DeepSeek's name, vLLM's until late 2025) or `reasoning` (vLLM's since) is output too: the first token
of either kind is the first token, as vLLM counts it; the finished output says how many were reasoning
(the server's `usage.completion_tokens_details.reasoning_tokens` where it reports them, else what the
reasoning chunks carried) and where the answer's first token sits among the output tokens.

StreamParser takes a response's reads as the stream loop stamped them (openai_loop.py) and splits
them into `data:` lines, each arriving at the stamp of the read that completed it (several events in one
read are still one arrival each, with the same stamp, as vLLM's benchmark counts them); the request's
last output carries its HTTP phases (HTTP_PHASES, perf_counter seconds). Chunks are decoded into typed
structs (msgspec): ~1 us a chunk where json.loads and its dict lookups took ~8."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from llmbench.backends.base import ServedOutput
from llmbench.engine.request import FinishReason

UNKNOWN_TOKEN = -1  # output token ids a server does not return (requests.jsonl with output.save_tokens)
_ONE_UNKNOWN = (UNKNOWN_TOKEN,)  # a chunk with text but no token_ids: one token
FINISH_REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}
SERVER_TIMES = ("t_queued", "t_scheduled", "t_first_token", "t_token_handed")
# the loop began the request, its connection was ready, the request was written, the response's headers
# were in, its first body bytes were read (requests.jsonl's columns of the same names, with _time)
HTTP_PHASES = ("send_start", "connect", "request_sent", "headers", "first_byte")


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None  # a reasoning model's thinking: DeepSeek, older vLLM
    reasoning: str | None = None  # the same under vLLM's name since late 2025 (its PR 27752)


class _Choice(msgspec.Struct, gc=False):
    text: str | None = None  # completions
    delta: _Delta | None = None  # chat
    token_ids: list[int] | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None  # prompt tokens the server's prefix cache held (vLLM, SGLang, ours)


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None  # of the completion tokens, the reasoning's (OpenAI, recent vLLM)


class _Usage(msgspec.Struct, gc=False):
    completion_tokens: int
    prompt_tokens: int | None = None  # as the server counted them: a chat template's tokens included
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Chunk(msgspec.Struct, gc=False):
    """The fields of a chunk the counting reads; the rest is skipped unread."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None  # vLLM's way of failing a stream that has started
    server_timestamps: dict[str, Any] | None = None  # llmbench serve's own times for the request


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_DATA_LINE = re.compile(rb"^data:(.*)$", re.MULTILINE)  # a line's payload, before its strip()


class RequestFailed(Exception):
    """The request ends as an error with this message."""


@dataclass
class StreamReader:
    request_id: str
    chat: bool
    counted: int = 0  # tokens the chunks with text carried
    last_arrival: float | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None  # from usage
    prompt_tokens: int | None = None  # from usage
    cached_tokens: int | None = None  # from usage.prompt_tokens_details
    reasoning_counted: int = 0  # tokens the chunks with reasoning text (and no answer text) carried
    reasoning_tokens: int | None = None  # from usage.completion_tokens_details
    answer_start: int | None = None  # tokens counted before the first chunk with answer text
    server_times: dict = field(default_factory=dict)

    def feed(self, data: str | bytes, now: float) -> list[ServedOutput]:
        """The outputs of one event's data (read at `now`); RequestFailed for an error or malformed chunk."""
        ids: list[int] = []
        self.add(data, now, ids)
        return [ServedOutput(self.request_id, ids, t_emit=now)] if ids else []

    def add(self, data: str | bytes, now: float, ids: list[int]) -> int:
        """Appends to `ids` the token ids one event's data brings (none without text), read at `now`, and
        says how many. Into the caller's list: a read's events share one, not a list an event."""
        try:
            chunk = _decode_chunk(data)
        except msgspec.DecodeError as e:
            raise RequestFailed(f"malformed chunk ({_why_malformed(data, e)}): {_clip(data)}") from None
        if chunk.error is not None:
            raise RequestFailed(f"server error: {error_message(json.dumps(chunk.error))}")
        before = len(ids)
        for choice in chunk.choices or ():
            delta = choice.delta
            text = (delta.content if delta else None) if self.chat else choice.text
            if text:
                if self.answer_start is None:
                    self.answer_start = self.counted + len(ids) - before
                ids += choice.token_ids or _ONE_UNKNOWN
            elif delta is not None and (delta.reasoning_content or delta.reasoning):
                thought = choice.token_ids or _ONE_UNKNOWN
                self.reasoning_counted += len(thought)
                ids += thought
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        count = len(ids) - before
        if count:
            self.counted += count
            self.last_arrival = now
        if chunk.usage is not None:
            usage = chunk.usage
            self.completion_tokens, self.prompt_tokens = usage.completion_tokens, usage.prompt_tokens
            if usage.prompt_tokens_details is not None:
                self.cached_tokens = usage.prompt_tokens_details.cached_tokens
            if usage.completion_tokens_details is not None:
                self.reasoning_tokens = usage.completion_tokens_details.reasoning_tokens
        if chunk.server_timestamps:
            self.server_times = chunk.server_timestamps
        return count

    def finished(self, wall_offset: float) -> ServedOutput:
        """The last output, once the stream has ended; `wall_offset` is this process's wall clock minus
        its perf_counter, to bring the server's timestamps onto it."""
        if self.finish_reason is None:
            raise RequestFailed("the stream ended without a finish_reason")
        reason = FINISH_REASONS.get(self.finish_reason, FinishReason.ERROR)
        error = None if reason != FinishReason.ERROR else f"finish_reason {self.finish_reason!r}"
        total = self.completion_tokens if self.completion_tokens is not None else self.counted
        rest = [UNKNOWN_TOKEN] * max(0, total - self.counted)
        when = self.last_arrival if self.last_arrival is not None else time.perf_counter()
        served = self._client_clock(wall_offset)
        last = ServedOutput(self.request_id, rest, True, reason, error, when, server_timestamps=served)
        last.prompt_tokens, last.cached_tokens = self.prompt_tokens, self.cached_tokens
        reasoning = self.reasoning_tokens if self.reasoning_tokens is not None else self.reasoning_counted
        if reasoning or self.reasoning_counted:  # a server's count of 0 with no reasoning streamed: none
            last.reasoning_tokens, last.answer_start = reasoning, self.answer_start
        return last

    def _client_clock(self, wall_offset: float) -> dict | None:
        """The server's timestamps on this process's perf_counter clock, or None without them."""
        times = self.server_times
        if not all(key in times for key in SERVER_TIMES):
            return None
        shift = float(times.get("wall_offset", wall_offset)) - wall_offset
        return {key: _shift(times[key], shift) for key in SERVER_TIMES}


def _shift(value, shift: float):
    if isinstance(value, list):
        return [v + shift for v in value]
    return None if value is None else value + shift


def error_message(body: str) -> str:
    """The message of an OpenAI-style error body (or a FastAPI one's detail), else the body itself, on
    one line."""
    try:
        data = json.loads(body)
        error = (data.get("error") or data.get("detail") or data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = message if isinstance(message, str) else json.dumps(message)
    except ValueError:
        text = body
    return " ".join(text.split())[:300]


def _why_malformed(data: str | bytes, error: msgspec.DecodeError) -> str:
    """Python's json error for a chunk that is no JSON (the message users know), else msgspec's for
    JSON of the wrong shape."""
    try:
        json.loads(data)
    except ValueError as e:
        return f"{type(e).__name__}: {e}"
    return f"{type(error).__name__}: {error}"


def _clip(data: str | bytes) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return text[:200]


class StreamParser:
    """One request's reads, as the stream loop hands them over, turned into its outputs."""

    def __init__(self, request_id: str, chat: bool, sent: tuple[str, list[int]] | None = None):
        """`sent`: the prompt's text and its ids, where the backend made the text, for the first output."""
        self.reader = StreamReader(request_id, chat)
        self.sent = sent
        self.done = False  # its last output is out: nothing more of the stream is of use
        self._pending = b""  # the start of a line the next read completes
        self._ended = False  # [DONE] seen
        self._phases: list[float | None] = [None] * len(HTTP_PHASES)

    def take(self, stamp: float, data: bytes | str | None, wall_offset: float) -> list[ServedOutput]:
        """The outputs of one item from the loop: a read's bytes, the end (None) or a failure (its
        message), or its start (its submit time); `wall_offset` as StreamReader.finished takes it."""
        try:
            if isinstance(data, float):
                first = ServedOutput(self.reader.request_id, [], t_emit=stamp, submitted=data)
                if self.sent is not None:
                    first.prompt, first.prompt_token_ids = self.sent
                return [first]
            if isinstance(data, bytes):
                if self._phases[4] is None:
                    self._phases[4] = stamp
                return self._read(data, stamp)
            if isinstance(data, list):  # the headers are in: the request's phases so far
                self._phases[:4] = [*data, stamp]
                return []
            if data is not None:
                raise RequestFailed(data)
            last = self.reader.finished(wall_offset)
        except RequestFailed as e:
            last = ServedOutput(self.reader.request_id, [], True, FinishReason.ERROR, str(e), stamp)
        if self._phases[0] is not None:
            last.http_phases = dict(zip(HTTP_PHASES, self._phases, strict=True))
        self.done = True
        return [last]

    def _read(self, data: bytes, stamp: float) -> list[ServedOutput]:
        """One output for all the chunks a read completed, at the read's stamp: they reached the client
        together. Several of them are still an arrival each (event_tokens), as vLLM's benchmark stamps
        each event it parses."""
        if self._ended:
            return []
        data = self._pending + data
        complete = data.rfind(b"\n") + 1  # the lines before it are whole; the rest waits for the next read
        self._pending = data[complete:]
        add = self.reader.add
        ids: list[int] = []
        sizes = []
        # the `data:` lines only (not SSE comments, event names, the blank line between events), found in
        # one pass of the regex engine: splitting the read into lines and testing each in Python cost
        # ~0.4 us an event, a tenth of the runner's parse time
        for line in _DATA_LINE.findall(data, 0, complete):
            payload = line.strip()
            if payload == b"[DONE]":
                self._ended = True
                break
            count = add(payload, stamp, ids)
            if count:
                sizes.append(count)
        if not ids:
            return []
        events = sizes if len(sizes) > 1 else None
        return [ServedOutput(self.reader.request_id, ids, t_emit=stamp, event_tokens=events)]
