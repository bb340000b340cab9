"""One streamed OpenAI completion read chunk by chunk: what each `data:` event carries, and the
finished output at the stream's end. The counting is vLLM's benchmark client's: a chunk with text is
one arrival however many tokens it carries (as many as its `token_ids` list, one without), the first
is the first token, and the output token count is the server's `usage` (tokens no chunk showed, say
ones whose text a detokenizer held back, join the last chunk)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from llmbench.backends.base import ServedOutput
from llmbench.engine.request import FinishReason

UNKNOWN_TOKEN = -1  # output token ids a server does not return (requests.jsonl with output.save_tokens)
FINISH_REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}
SERVER_TIMES = ("t_queued", "t_scheduled", "t_first_token", "t_token_handed")


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
    server_times: dict = field(default_factory=dict)

    def feed(self, data: str, now: float) -> list[ServedOutput]:
        """The outputs of one event's data (read at `now`); RequestFailed for an error or malformed chunk."""
        outputs = []
        try:
            chunk = json.loads(data)
            if "error" in chunk:  # vLLM's way of failing a stream that has started
                raise RequestFailed(f"server error: {error_message(json.dumps(chunk['error']))}")
            for choice in chunk.get("choices") or ():
                delta = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
                if delta:
                    ids = choice.get("token_ids") or [UNKNOWN_TOKEN]
                    self.counted += len(ids)
                    self.last_arrival = now
                    outputs.append(ServedOutput(self.request_id, list(ids), t_emit=now))
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
            if chunk.get("usage"):
                self.completion_tokens = int(chunk["usage"]["completion_tokens"])
            if chunk.get("server_timestamps"):
                self.server_times = dict(chunk["server_timestamps"])
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise RequestFailed(f"malformed chunk ({type(e).__name__}: {e}): {data[:200]}") from None
        return outputs

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
        return ServedOutput(self.request_id, rest, True, reason, error, when, server_timestamps=served)

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
    """The message of an OpenAI-style error body, else the body itself, on one line."""
    try:
        data = json.loads(body)
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = message if isinstance(message, str) else json.dumps(message)
    except ValueError:
        text = body
    return " ".join(text.split())[:300]
