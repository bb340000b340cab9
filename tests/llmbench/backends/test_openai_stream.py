"""StreamParser: a response's reads, split anywhere, become the outputs the counting rules give."""

from __future__ import annotations

import json

import pytest

from llmbench.backends.openai_stream import UNKNOWN_TOKEN, StreamParser
from llmbench.metrics.requests import latency_samples
from llmbench.results.records import RequestRecord
from llmbench.run.recorder import record_outputs


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
    # the second read completed two chunks: one output at the read's time, two events of a token each
    assert [(len(o.new_token_ids), o.t_emit, o.event_tokens) for o in second] == [(2, 2.0, [1, 1])]
    assert first[0].event_tokens is None  # a read of one event is that event
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


def test_events_coalesced_in_one_read_are_an_arrival_each():
    # the server sends a token every 10 ms; the client reads every 20 ms, two events a read, the last read
    # one event of three tokens (a multi-step chunk): vLLM's benchmark pools a gap per event
    reads = [(0.010, event("a")), (0.030, event("b") + event("c")), (0.050, event("d") + event("e"))]
    reads += [(0.070, multi(3, "length") + b"data: [DONE]\n\n")]
    parser = StreamParser("r", chat=False)
    record = RequestRecord("r", trial=0, warmup=False, prompt_len=4)
    live = {"r": record}
    for stamp, data in [*reads, (0.071, None)]:
        record_outputs(live, parser.take(stamp, data, wall_offset=0.0), stamp, 0.0, True, False)
    assert record.token_times == [0.010, 0.030, 0.030, 0.050, 0.050, 0.070, 0.070, 0.070]
    assert record.same_read_events == [2, 4]
    itl = latency_samples([record])["itl"]
    assert itl == pytest.approx([0.020, 0.0, 0.020, 0.0, 0.020])  # 8 tokens, 6 events, 5 gaps
    assert sum(itl) / len(itl) == pytest.approx(0.012)  # merging each read's events read 0.020


def multi(tokens: int, finish: str) -> bytes:
    """One event carrying `tokens` token ids, as a multi-step server sends them."""
    choice = {"index": 0, "text": "x" * tokens, "token_ids": list(range(tokens)), "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def delta(finish: str | None = None, **fields) -> bytes:
    """A chat chunk whose delta holds `fields` (content, reasoning_content, reasoning)."""
    choice = {"index": 0, "delta": fields, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_is_output_and_the_answer_starts_where_content_first_comes(field):
    # three reasoning events, one holding both (the end of thinking), one of content; usage gives no
    # reasoning count, so the reasoning events' tokens are it (one an event without token ids)
    reads = [(0.010, delta(role="assistant", **{field: "think"})), (0.020, delta(**{field: "more"}))]
    reads += [(0.030, delta(**{field: "."}, content="Ans") + delta(content="wer"))]
    reads += [
        (
            0.045,
            delta("length", content="!") + b'data: {"choices": [], "usage": {"completion_tokens": 6}}\n\n',
        )
    ]
    parser = StreamParser("r", chat=True)
    record = RequestRecord("r", trial=0, warmup=False, prompt_len=4)
    live = {"r": record}
    for stamp, data in [*reads, (0.046, None)]:
        record_outputs(live, parser.take(stamp, data, wall_offset=0.0), stamp, 0.0, True, False)
    # TTFT is the first reasoning token; the answer's first token is the 3rd, the mixed event
    assert record.first_token_time == 0.010 and record.answer_start == 2
    assert record.token_times == [0.010, 0.020, 0.030, 0.030, 0.045, 0.045]  # usage's 6th joins the last
    assert record.reasoning_tokens == 2 and record.output_len == 6
    assert parser.reader.reasoning_counted == 2


def test_the_servers_reasoning_count_wins_and_a_zero_with_no_reasoning_streamed_is_none():
    usage = {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}}
    body = delta(reasoning="x") + delta("stop", content="y")
    body += b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
    parser = StreamParser("r", chat=True)
    parser.take(1.0, body, wall_offset=0.0)
    (last,) = parser.take(2.0, None, wall_offset=0.0)
    assert (last.reasoning_tokens, last.answer_start) == (7, 1)
    usage["completion_tokens_details"]["reasoning_tokens"] = 0
    plain = delta("stop", content="y") + b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
    parser = StreamParser("r", chat=True)
    parser.take(1.0, plain + b"\n\n", wall_offset=0.0)
    (last,) = parser.take(2.0, None, wall_offset=0.0)
    assert (last.reasoning_tokens, last.answer_start) == (None, None)  # an answer with no reasoning
