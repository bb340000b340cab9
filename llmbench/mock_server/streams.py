"""The mock's streams: each response's SSE chunks, due on a fixed schedule from when its request arrived,
and one scheduler that sends every due chunk and records when it did.

One timer for all streams, not one per stream: at 512 streams of 1 ms chunks a timer each is 512k
callbacks a second. A stream that falls behind (the loop was late) sends every chunk now due in one
write, as a loaded server would: the send time recorded is the write's, so the record is what the
client could have seen, not the schedule."""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from dataclasses import dataclass, field

from llmbench.mock_server.settings import MockSettings

EARLY_S = 0.0005  # chunks due this soon go now: the loop's timers round to whole milliseconds
TOKEN_TEXT = " a"  # every output token's text
CREATED = 1_700_000_000


@dataclass
class StreamRecord:
    """One completion request as the mock saw and answered it (times: CLOCK_MONOTONIC seconds)."""

    id: int
    path: str
    status: int
    received: float
    prompt: str = ""  # "ids" or "text"
    model: str = ""  # the served model asked for
    prompt_tokens: int = 0  # token ids given, or words of text
    tokens: int = 0  # output tokens streamed
    sends: list[float] = field(default_factory=list)  # one entry a write
    events: list[int] = field(default_factory=list)  # chunks (SSE events with tokens) in each write
    backlogged: int = 0  # writes that found the socket's buffer still holding earlier bytes

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def chunk_bytes(data: dict) -> bytes:
    """One SSE event framed as one HTTP/1.1 chunk."""
    event = b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"  # the last event and the end of the chunked body


class SpecCounters:
    """vLLM's speculative-decoding counters as the mock keeps them (settings.spec_draft_tokens): each
    chunk sent is one draft whose tokens past the first were accepted."""

    def __init__(self, draft_tokens: int):
        self.draft_len = draft_tokens
        self.drafts = self.draft_tokens = self.accepted_tokens = 0

    def add(self, chunks: int, tokens: int) -> None:
        self.drafts += chunks
        self.draft_tokens += chunks * self.draft_len
        self.accepted_tokens += tokens - chunks

    def exposition(self) -> str:
        """GET /metrics's text, as vLLM's prometheus_client writes the three counters."""
        lines = []
        for name, value in (
            ("num_drafts", self.drafts),
            ("num_draft_tokens", self.draft_tokens),
            ("num_accepted_tokens", self.accepted_tokens),
        ):
            lines += [
                f"# TYPE vllm:spec_decode_{name} counter",
                f'vllm:spec_decode_{name}_total{{model_name="mock"}} {value}.0',
            ]
        return "\n".join(lines) + "\n"


class Stream:
    """One streamed response: its tokens in chunks due `gap` apart from `start`."""

    def __init__(
        self,
        transport,
        record: StreamRecord,
        settings: MockSettings,
        chat: bool,
        usage: bool,
        spec: SpecCounters | None = None,
    ):
        self.transport = transport
        self.record = record
        self.spec = spec
        self.closed = False
        self.on_done = None  # set by the connection: what runs once the body has ended
        k, n = settings.tokens_per_chunk, record.tokens
        self.k, self.chunks = k, -(-n // k)
        self.start = record.received + settings.ttft_ms / 1000
        self.gap = k * settings.itl_ms / 1000
        self.sent = 0
        # a chat answer's first `reasoning` tokens are reasoning (settings.reasoning_tokens)
        self.reasoning = min(settings.reasoning_tokens, n) if chat else 0
        self.field = settings.reasoning_field
        self.chat = chat
        self.envelope = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{record.id}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": CREATED,
            "model": record.model,
        }
        self.tail = DONE
        if usage:
            counts = {"prompt_tokens": record.prompt_tokens, "completion_tokens": n}
            counts["total_tokens"] = record.prompt_tokens + n
            if self.reasoning:
                counts["completion_tokens_details"] = {"reasoning_tokens": self.reasoning}
            self.tail = chunk_bytes(self.envelope | {"choices": [], "usage": counts}) + DONE
        # the bytes of the first, a middle and the last chunk: built once, written as often as due
        envelope = self.envelope
        self.first = chunk_bytes(envelope | _choices(chat, TOKEN_TEXT * k, None, role=True))
        self.body = chunk_bytes(envelope | _choices(chat, TOKEN_TEXT * k, None, role=False))
        last_text = TOKEN_TEXT * (n - (self.chunks - 1) * k)
        self.last = chunk_bytes(envelope | _choices(chat, last_text, "length", role=self.chunks == 1))
        self.last += self.tail
        self._made: dict[tuple, bytes] = {}  # a reasoning answer's chunks, by their make-up

    def due(self) -> float:
        return self.start + self.sent * self.gap

    def send_due(self, horizon: float) -> bool:
        """Write every chunk due by `horizon` (at least the next) in one write; False once the last went."""
        upto = self.chunks
        if self.gap > 0:
            upto = min(upto, int((horizon - self.start) / self.gap) + 1)
        upto = max(upto, self.sent + 1)
        data = b"".join(map(self._chunk, range(self.sent, upto))) if self.reasoning else self._plain(upto)
        backlogged = self.transport.get_write_buffer_size() > 0
        self.transport.write(data)
        record = self.record
        record.sends.append(time.monotonic())
        record.events.append(upto - self.sent)
        record.backlogged += backlogged
        if self.spec is not None:
            self.spec.add(upto - self.sent, min(upto * self.k, record.tokens) - self.sent * self.k)
        self.sent = upto
        return upto < self.chunks

    def _plain(self, upto: int) -> bytes:
        """Chunks sent..upto of an answer without reasoning, from the three prebuilt ones."""
        parts = []
        j = self.sent
        if j == 0 and self.chunks > 1:
            parts.append(self.first)
            j = 1
        middle_end = min(upto, self.chunks - 1)
        if middle_end > j:
            parts.append(self.body * (middle_end - j))
            j = middle_end
        if upto == self.chunks and j == self.chunks - 1:
            parts.append(self.last)
        return b"".join(parts)

    def _chunk(self, i: int) -> bytes:
        """Chunk i of a reasoning answer: reasoning tokens, answer tokens, or both where it holds the
        phase's end (as vLLM's reasoning parsers send the chunk that closes the thinking)."""
        start = i * self.k
        end = min(start + self.k, self.record.tokens)
        thought = max(0, min(end, self.reasoning) - start)
        key = (thought, end - start - thought, i == 0, i == self.chunks - 1)
        if key not in self._made:
            delta = {"role": "assistant"} if i == 0 else {}
            if thought:
                delta[self.field] = TOKEN_TEXT * thought
            if key[1]:
                delta["content"] = TOKEN_TEXT * key[1]
            choice = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": "length" if key[3] else None,
            }
            self._made[key] = chunk_bytes(self.envelope | {"choices": [choice]}) + (
                self.tail if key[3] else b""
            )
        return self._made[key]


def _choices(chat: bool, text: str, finish: str | None, role: bool) -> dict:
    if chat:
        delta = {"role": "assistant", "content": text} if role else {"content": text}
        return {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    return {"choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}


class Scheduler:
    """Sends every stream's chunks when due, from one timer armed for the earliest."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._heap: list[tuple[float, int, Stream]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = float("inf")

    def add(self, stream: Stream) -> None:
        self._push(stream)

    def _push(self, stream: Stream) -> None:
        self._seq += 1
        due = stream.due()
        heapq.heappush(self._heap, (due, self._seq, stream))
        if due < self._armed_for:
            self._arm(due)

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = due
        self._timer = self._loop.call_later(max(0.0, due - time.monotonic()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._armed_for = float("inf")
        heap = self._heap
        horizon = time.monotonic() + EARLY_S
        ready = []
        while heap and heap[0][0] <= horizon:
            ready.append(heapq.heappop(heap)[2])
        for stream in ready:
            if stream.closed:
                continue
            if stream.send_due(horizon):
                self._seq += 1
                heapq.heappush(heap, (stream.due(), self._seq, stream))
            else:
                stream.on_done()
        if heap:
            self._arm(heap[0][0])
