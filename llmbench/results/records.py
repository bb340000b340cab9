"""One request's row as the client saw it (requests.jsonl holds one a line), and reading them back."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

# a finished request's row is written between engine steps, and in a load that ends together dozens
# finish in one step: msgspec encodes a 256-token row in ~10 us, json.dumps in ~65 (2-core CPU)
_ROW_ENCODER = msgspec.json.Encoder()


CANCELLED = "cancelled"  # the finish_reason of a request the client hung up on (workload.cancel)


# Slotted: the runner adds each poll's token to every running request's record between engine steps,
# where a synchronous engine's GPU waits for it; a slotted record is one memory block, not two.
@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it. Times are seconds relative to the run start."""

    id: str
    trial: int
    warmup: bool
    prompt_len: int
    output_len: int = 0
    submit_time: float = 0.0
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)  # a chunk of k tokens repeats its time k times
    # token_times indices where an SSE event begins that came in the same read as the event before it:
    # it shares that read's time yet is an arrival of its own (None: no read held two events)
    same_read_events: list[int] | None = None
    finish_reason: str | None = None  # None: still running when the run stopped
    finish_time: float | None = None  # when the client saw it end: last token, error, abort or stop
    error: str | None = None
    prompt_token_ids: list[int] | None = None
    output_token_ids: list[int] | None = None
    prompt: str | None = None  # a dataset prompt's text (with save_tokens)
    # the engine's own times for the request when the server is ours (llmbench serve), run-relative
    server_timestamps: dict[str, Any] | None = None
    offered_rate: float | None = None  # under a ramp-up: the rate offered when it arrived
    # an HTTP request's phases as its client loop stamped them: it began sending (schedule lag: this
    # minus submit_time), its connection was ready, the request was written, the response's headers
    # were in, its first body bytes were read
    send_start_time: float | None = None
    connect_time: float | None = None
    request_sent_time: float | None = None
    headers_time: float | None = None
    first_byte_time: float | None = None
    session: int | None = None  # a multi-turn session's index, and the turn (1 for the first)
    turn: int | None = None
    # where the server's usage counts the prompt: prompt_len is its count (a chat template's tokens
    # included) and this the workload's; cached_prompt_tokens, those its prefix cache held
    planned_prompt_len: int | None = None
    cached_prompt_tokens: int | None = None
    # where the stream had reasoning (a chat delta's reasoning_content or reasoning): how many of the
    # output tokens were reasoning (the server's usage count where it gives one), and the token_times
    # index of the answer's first token (None: no answer token came); the tokens before it are the
    # reasoning phase
    reasoning_tokens: int | None = None
    answer_start: int | None = None
    model: str | None = None  # under backend.models: the served model the request went to

    @property
    def succeeded(self) -> bool:
        return self.finish_reason in ("stop", "length") and self.output_len > 0

    def to_json(self, save_tokens: bool) -> str:
        # a shallow copy: dataclasses.asdict deep-copies token_times float by float (~1.1 ms of the
        # 1.3 ms a 512-token request took), on the runner's thread between engine steps
        data = self.fields_dict()
        if not save_tokens:
            del data["prompt_token_ids"], data["output_token_ids"], data["prompt"]
        for key in _ONLY_WHEN_SET:
            if data[key] is None:
                del data[key]
        return _ROW_ENCODER.encode(data).decode()

    def fields_dict(self) -> dict[str, Any]:
        """Every field by name, as a new dict holding the same values (the lists are not copied)."""
        return {name: getattr(self, name) for name in _RECORD_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)


HTTP_PHASE_COLUMNS = (
    "send_start_time",
    "connect_time",
    "request_sent_time",
    "headers_time",
    "first_byte_time",
)
_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
# keys only some runs have (coalesced reads, a served run's timestamps, a ramp's rate, an HTTP client's
# phases): rows of other runs leave them out
_ONLY_WHEN_SET = (
    "same_read_events",
    "server_timestamps",
    "offered_rate",
    "session",
    "turn",
    *HTTP_PHASE_COLUMNS,
    "planned_prompt_len",
    "cached_prompt_tokens",
    "reasoning_tokens",
    "answer_start",
    "model",
)


def load_requests(run_dir: str | Path) -> list[RequestRecord]:
    lines = (Path(run_dir) / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]
