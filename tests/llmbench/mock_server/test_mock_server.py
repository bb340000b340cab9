import json

import httpx
import pytest

from llmbench.mock_server import MockServer, MockSettings, StreamRecord, sent_latencies


def events(response: httpx.Response) -> list:
    """The data of every SSE event of a streamed response, [DONE] as the string."""
    lines = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def mock():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=5, tokens_per_chunk=2)) as server:
        yield server


def post(mock, path, body):
    return httpx.post(mock.url + path, json={"model": "mock", "stream": True} | body, timeout=30)


def test_completions_stream_chunks_usage_and_records_every_write(mock):
    mock.records(reset=True)
    response = post(mock, "/completions", {"prompt": [1, 2, 3], "stream_options": {"include_usage": True}})
    *chunks, usage, done = events(response)
    assert response.status_code == 200 and done == "[DONE]"
    assert [c["choices"][0]["text"] for c in chunks] == [" a a", " a a", " a"]  # 5 tokens, 2 a chunk
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    (record,) = mock.records()
    assert (record.status, record.prompt, record.prompt_tokens, record.tokens) == (200, "ids", 3, 5)
    assert sum(record.events) == 3 and len(record.sends) == len(record.events)
    assert record.received <= record.sends[0] and record.sends == sorted(record.sends)


def test_chat_streams_deltas_and_a_smaller_max_tokens_wins(mock):
    response = post(
        mock, "/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    )
    (chunk, done) = events(response)  # no usage chunk unless asked
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": " a"} and done == "[DONE]"
    assert chunk["object"] == "chat.completion.chunk"


def test_models_list_and_refusals(mock):
    cards = httpx.get(mock.url + "/models").json()["data"]
    assert [c["id"] for c in cards] == ["mock"] and cards[0]["max_model_len"] == 4096
    mock.records(reset=True)
    assert post(mock, "/completions", {"model": "other", "prompt": "x"}).status_code == 404
    assert httpx.post(mock.root + "/completions", json={"model": "mock", "prompt": "x"}).status_code == 404
    assert post(mock, "/completions", {"prompt": {"not": "a prompt"}}).status_code == 400
    assert [r.status for r in mock.records()] == [404, 404, 400]  # every completion request counts
    assert mock.records(reset=True) and mock.records() == []


def test_text_only_and_no_stream_options_modes():
    settings = MockSettings(ttft_ms=0, itl_ms=0, output_tokens=2, text_only=True, no_stream_options=True)
    with MockServer(settings) as mock:
        refused = post(mock, "/completions", {"prompt": [1, 2]})
        assert refused.status_code == 400 and "token ids" in refused.json()["error"]["message"]
        assert post(mock, "/completions", {"prompt": "hi", "stream_options": {}}).status_code == 400
        assert post(mock, "/completions", {"prompt": "hi"}).status_code == 200
        assert [r.status for r in mock.records()] == [400, 400, 200]


def test_a_prefix_moves_the_api():
    with MockServer(MockSettings(prefix="/api/v2", ttft_ms=0, itl_ms=0)) as mock:
        assert mock.url.endswith("/api/v2")
        assert httpx.get(mock.url + "/models").status_code == 200
        assert httpx.get(mock.root + "/v1/models").status_code == 404


def test_sent_latencies_judge_what_was_written():
    records = [
        StreamRecord(
            0, "/v1/completions", 200, received=10.0, tokens=3, sends=[10.05, 10.06, 10.08], events=[1, 1, 1]
        ),
        # a late loop sent two chunks in one write: the client sees them together, one gap of 0
        StreamRecord(1, "/v1/completions", 200, received=10.0, tokens=3, sends=[10.07, 10.09], events=[1, 2]),
        StreamRecord(2, "/v1/completions", 400, received=10.5),  # refused: not judged
    ]
    sent = sent_latencies(records)
    assert sent.requests == 2 and sent.chunks == 6 and sent.tokens == 6
    assert sent.ttft_s == pytest.approx([0.05, 0.07])
    assert sent.itl_s == pytest.approx([0.01, 0.02, 0.02, 0.0])
    assert sent.span_s == pytest.approx(0.09)
    assert sent.median_ttft_s == pytest.approx(0.06) and sent.mean_itl_s == pytest.approx(0.0125)


def test_settings_round_trip_through_the_command_line():
    import argparse

    settings = MockSettings(ttft_ms=1.5, text_only=True, prefix="/x", reasoning_tokens=2, spec_draft_tokens=3)
    parser = argparse.ArgumentParser()
    MockSettings.add_arguments(parser)
    assert MockSettings.from_args(parser.parse_args(settings.to_args())) == settings
    with pytest.raises(ValueError, match="prefix"):
        MockSettings(prefix="v1")


def test_a_reasoning_phase_streams_its_field_first_and_usage_counts_it():
    settings = MockSettings(ttft_ms=0, itl_ms=0, output_tokens=5, tokens_per_chunk=2, reasoning_tokens=3)
    with MockServer(settings) as mock:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": True}}
        *chunks, usage, _ = events(post(mock, "/chat/completions", body))
        plain = events(post(mock, "/completions", {"prompt": "hi"}))  # completions have no reasoning
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [
        {"role": "assistant", "reasoning_content": " a a"},
        {"reasoning_content": " a", "content": " a"},  # the chunk that ends the thinking holds both
        {"content": " a"},
    ]
    assert usage["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}
    assert [c["choices"][0]["text"] for c in plain[:-1]] == [" a a", " a a", " a"]


def test_speculative_counters_count_each_chunk_as_a_draft():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=7, tokens_per_chunk=3)) as mock:
        assert httpx.get(mock.root + "/metrics").status_code == 404  # no counters asked for: none
    settings = MockSettings(ttft_ms=0, itl_ms=0, output_tokens=7, tokens_per_chunk=3, spec_draft_tokens=4)
    with MockServer(settings) as mock:
        post(mock, "/completions", {"prompt": [1]})
        text = httpx.get(mock.root + "/metrics").text
    # 7 tokens in chunks of 3, 3, 1: three drafts of 4 proposed tokens, 2 + 2 + 0 accepted
    assert 'vllm:spec_decode_num_drafts_total{model_name="mock"} 3.0' in text
    assert 'vllm:spec_decode_num_draft_tokens_total{model_name="mock"} 12.0' in text
    assert 'vllm:spec_decode_num_accepted_tokens_total{model_name="mock"} 4.0' in text
    with pytest.raises(ValueError, match="spec_draft_tokens"):
        MockSettings(tokens_per_chunk=3, spec_draft_tokens=1)
    with pytest.raises(ValueError, match="reasoning_field"):
        MockSettings(reasoning_field="thinking")
