"""StreamParser: a response's reads, split anywhere, become the outputs the counting rules give."""

from __future__ import annotations

import json

from llmbench.backends.openai_stream import UNKNOWN_TOKEN, StreamParser


def event(text: str, finish: str | None = None, **extra) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice], **extra}).encode() + b"\n\n"


def test_lines_split_across_reads_arrive_at_the_read_that_completes_them():
    body = (
        event("a")
        + event("b")
        + event("c", "length")
        + b'data: {"choices": [], "usage": {"completion_tokens": 4}}\n\n'
    )
    body += b"data: [DONE]\n\n"
    cut = body.index(b"b") + 3  # inside the second event
    parser = StreamParser("r", chat=False)
    first = parser.take(1.0, body[:cut], wall_offset=0.0)
    second = parser.take(2.0, body[cut:], wall_offset=0.0)
    (last,) = parser.take(3.0, None, wall_offset=0.0)
    assert [(o.new_token_ids, o.t_emit) for o in first] == [([UNKNOWN_TOKEN], 1.0)]
    # the second read completed two chunks: one output, one arrival time, two tokens
    assert [(len(o.new_token_ids), o.t_emit) for o in second] == [(2, 2.0)]
    # usage said 4 tokens, the chunks showed 3: the last output carries the one held back
    assert last.finished and last.finish_reason.value == "length" and last.new_token_ids == [UNKNOWN_TOKEN]
    assert last.t_emit == 2.0 and parser.done


def test_carriage_returns_comments_and_text_after_done_are_ignored():
    body = b": a comment\r\n" + event("x", "stop").replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n"
    parser = StreamParser("r", chat=False)
    outputs = parser.take(1.0, body + b"data: {not json}\n\n", wall_offset=0.0)
    assert [o.new_token_ids for o in outputs] == [[UNKNOWN_TOKEN]]
    assert parser.take(2.0, None, wall_offset=0.0)[0].finish_reason.value == "stop"


def test_a_malformed_chunk_or_a_failure_ends_the_request_with_its_reason():
    parser = StreamParser("r", chat=True)
    (failed,) = parser.take(1.5, b"data: {not json\n\n", wall_offset=0.0)
    assert parser.done and failed.finished and failed.t_emit == 1.5
    assert failed.error.startswith("malformed chunk (JSONDecodeError")
    wrong_shape = StreamParser("r", chat=False)
    (failed,) = wrong_shape.take(1.0, event("x").replace(b'"x"', b"7"), wall_offset=0.0)
    assert failed.error.startswith("malformed chunk (ValidationError: Expected `str | null`, got `int`")
    lost = StreamParser("r", chat=False)
    (failed,) = lost.take(4.0, "connection error: gone", wall_offset=0.0)
    assert failed.error == "connection error: gone" and failed.finish_reason.value == "error"
