"""Reading Mooncake and BurstGPT traces row by row: their fields, their times, and a malformed row
named by its file and line."""

import json

import pytest

from llmbench.run.traces import TraceError, read_trace


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_mooncake_rows_keep_their_lengths_blocks_and_time_in_seconds(tmp_path):
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            {"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]},
            "",
            {"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]},
        ],
    )
    rows = list(read_trace("mooncake", path))
    assert [(r.line, r.time_s, r.input_length, r.output_length, r.hash_ids) for r in rows] == [
        (1, 0.0, 700, 5, [0, 1]),
        (3, 1.5, 600, 3, [0, 2]),
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("{not json", "not a JSON object"),
        ("[1, 2]", "expected a JSON object, got list"),
        ({"timestamp": -1, "input_length": 4, "output_length": 1}, "timestamp: expected a number >= 0"),
        ({"timestamp": 0, "input_length": 0, "output_length": 1}, "input_length: expected an integer >= 1"),
        ({"timestamp": 0, "input_length": 4, "output_length": True}, "output_length: expected an integer"),
        ({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": ["a"]}, "hash_ids"),
    ],
)
def test_a_malformed_mooncake_row_is_named_by_its_line(tmp_path, row, message):
    good = {"timestamp": 0, "input_length": 4, "output_length": 1}
    path = write_jsonl(tmp_path / "trace.jsonl", [good, good, row])
    with pytest.raises(TraceError, match=rf"trace\.jsonl:3: .*{message}"):
        list(read_trace("mooncake", path))


def test_a_trace_whose_time_goes_back_is_malformed(tmp_path):
    rows = [{"timestamp": t, "input_length": 4, "output_length": 1} for t in (0, 2000, 1000)]
    with pytest.raises(TraceError, match=r":3: timestamp goes back in time"):
        list(read_trace("mooncake", write_jsonl(tmp_path / "t.jsonl", rows)))


def test_burstgpt_rows_skip_the_failed_requests(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,0,0,0,Conversation log\n"
        "45.5,GPT-4,1087,230,1317,API log\n"
    )
    rows = list(read_trace("burstgpt", path))
    assert [(r.line, r.time_s, r.input_length, r.output_length, r.hash_ids) for r in rows] == [
        (2, 5, 472, 18, []),
        (4, 45.5, 1087, 230, []),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("5,ChatGPT,many,18,490,Conversation log", "Request tokens: expected a number, got 'many'"),
        ("5,ChatGPT,12.5,18,490,Conversation log", "token counts must be integers"),
        ("5,ChatGPT,12", "Response tokens: missing"),
        ("nan,ChatGPT,12,18,30,Conversation log", "Timestamp: expected a number >= 0"),
    ],
)
def test_a_malformed_burstgpt_row_is_named_by_its_line(tmp_path, line, message):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,4,4\n" + line + "\n")
    with pytest.raises(TraceError, match=rf"burst\.csv:3: {message}"):
        list(read_trace("burstgpt", path))


def test_a_burstgpt_file_without_its_columns_says_which_are_missing(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("time,prompt,answer\n1,2,3\n")
    with pytest.raises(TraceError, match=r"burst\.csv:1: the header lacks 'Timestamp', 'Request tokens'"):
        list(read_trace("burstgpt", path))


def test_a_missing_trace_file_is_one_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read the trace"):
        list(read_trace("mooncake", tmp_path / "absent.jsonl"))


def test_only_the_rows_asked_for_are_read(tmp_path):
    """A trace is read lazily: a broken row past what a run takes costs nothing."""
    rows = [{"timestamp": 0, "input_length": 4, "output_length": 1}] * 3 + ["{broken"]
    reader = read_trace("mooncake", write_jsonl(tmp_path / "t.jsonl", rows))
    assert [next(reader).line for _ in range(3)] == [1, 2, 3]
