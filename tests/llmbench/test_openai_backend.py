import json
import socket
import time

import pytest
from llmbench.engine.request import SamplingParams

from llmbench.backends.openai import OpenAIBackend
from llmbench.config.load import parse_config
from llmbench.config.schema import ConfigError
from llmbench.metrics.requests import arrival_gaps
from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark
from tests.llmbench.sse_server import MODEL, Script, SSEServer

RUN = {
    "name": "http",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 4, "input": {"mean": 5}, "output": {"mean": 3}},
    "output": {"report": False},
}


def config(url, *overrides):
    return parse_config(RUN, ["backend.type=openai", f"backend.url={url}", *overrides])


def drive(backend, n, max_tokens=3, first=0):
    """Submit n requests at once (ids from `first` on: a closed stream's last reads may still be on
    their way under its id) and poll until each has finished: the outputs per request id."""
    outputs = {str(i): [] for i in range(first, first + n)}
    for request_id in outputs:
        backend.submit(request_id, [7, 8, 9], SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    deadline = time.monotonic() + 20
    while backend.has_unfinished() and time.monotonic() < deadline:
        for output in backend.poll():
            outputs[output.request_id].append(output)
    assert not backend.has_unfinished()
    # each stream's first output, without tokens, says when its loop began it
    assert all(got[0].submitted is not None and not got[0].new_token_ids for got in outputs.values())
    return {request_id: got[1:] for request_id, got in outputs.items()}


def connected(url, *overrides):
    backend = OpenAIBackend()
    backend.start(config(url, *overrides))
    return backend


def test_stream_counts_chunks_as_arrivals_and_tokens_from_usage():
    scripts = [Script(chunks=[1, 3, 2], gap_s=0.01, empty_first=True)]
    with SSEServer(scripts, max_model_len=77) as server:
        backend = connected(server.url, "workload.ignore_eos=true")
        try:
            assert backend.model_info.max_model_len == 77  # from the model card, as vLLM lists it
            (outputs,) = drive(backend, 1).values()
        finally:
            backend.close()
    body = server.bodies[0]
    assert body["model"] == MODEL and body["prompt"] == [7, 8, 9] and body["ignore_eos"] is True
    assert body["min_tokens"] == body["max_tokens"]  # the same lengths from a server without ignore_eos
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    # three chunks with text (the empty one is no arrival); the text chunks show 3 tokens, usage says 6
    assert [len(o.new_token_ids) for o in outputs] == [1, 1, 1, 3]
    assert outputs[-1].finished and outputs[-1].finish_reason.value == "length"
    assert outputs[-1].t_emit == outputs[-2].t_emit  # the uncounted tokens join the last chunk
    times = [o.t_emit for o in outputs[:3]]
    assert times == sorted(times) and len(set(times)) == 3


def test_each_fault_fails_its_request_alone_with_its_reason():
    scripts = [
        Script(kind="status", status=500),
        Script(kind="status", status=400),
        Script(kind="malformed"),
        Script(kind="disconnect"),
        Script(kind="stall"),
        Script(kind="error_chunk"),
        Script(kind="no_finish"),
        Script(),
    ]
    with SSEServer(scripts) as server:
        backend = connected(server.url, "workload.request_timeout_s=0.5")
        try:
            outputs = {}
            for i in range(len(scripts)):  # one at a time: request i meets script i
                outputs.update(drive(backend, 1, first=i))
        finally:
            backend.close()
    errors = [out[-1].error for out in outputs.values()]
    assert [out[-1].finish_reason.value for out in outputs.values()] == ["error"] * 7 + ["length"]
    assert errors[0] == "HTTP 500: injected failure"
    assert errors[1] == "HTTP 400: injected failure"
    assert errors[2].startswith("malformed chunk (JSONDecodeError")
    assert errors[3] == "connection error: the server closed the connection before the response ended"
    assert errors[4] == "stream stalled: no data within request_timeout_s=0.5"
    assert errors[5] == "server error: engine core died"
    assert errors[6] == "the stream ended without a finish_reason"
    assert errors[7] is None


def test_connection_refused_fails_each_request():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ValueError, match="backend.url: cannot list the models"):
        connected(url)
    backend = connected(url, "backend.model=m")  # named: a server that lists no models is usable
    try:
        outputs = drive(backend, 2)
    finally:
        backend.close()
    for out in outputs.values():
        assert out[-1].finished and out[-1].error.startswith("connection error: ConnectionRefusedError")


def test_abort_closes_the_stream_and_drops_its_chunks():
    with SSEServer([Script(chunks=[1] * 50, gap_s=0.02)]) as server:
        backend = connected(server.url)
        try:
            backend.submit("a", [1, 2], SamplingParams(max_tokens=50))
            while not any(o.new_token_ids for o in backend.poll()):  # streaming
                pass
            backend.abort("a")
            assert not backend.has_unfinished()
            deadline = time.monotonic() + 5
            while not server.closed and time.monotonic() < deadline:
                assert backend.poll() == []
        finally:
            backend.close()
    assert server.closed == 1


def test_api_key_from_the_named_environment_variable(monkeypatch):
    with SSEServer() as server:
        with pytest.raises(ValueError, match="no environment variable LLMB_KEY set"):
            connected(server.url, "backend.api_key_env=LLMB_KEY")
        monkeypatch.setenv("LLMB_KEY", "sekrit")
        backend = connected(server.url, "backend.api_key_env=LLMB_KEY")
        try:
            drive(backend, 1)
        finally:
            backend.close()
    assert server.headers[0]["authorization"] == "Bearer sekrit"


def test_config_mistakes_name_their_key():
    with pytest.raises(ConfigError, match="prompt_format"):
        config("http://x/v1", "backend.endpoint=chat")
    with pytest.raises(ConfigError, match="backend.url"):
        parse_config(RUN, ["backend.type=openai"])
    with pytest.raises(ConfigError, match="backend.url: expected an http:// or https:// URL"):
        config("ftp://x/v1")
    with pytest.raises(ValueError, match="backend.url: Invalid port"):
        connected("http://[::1/v1", "backend.model=m")


def test_run_writes_every_request_and_the_vllm_metrics(tmp_path):
    # max_concurrency 1: request i meets script i + 1 (the first answers the preflight's test request);
    # the second fails, the run goes on
    server_times = {"t_queued": 1.0, "t_scheduled": 1.5, "t_first_token": 2.0, "t_token_handed": [2.0, 2.5]}
    scripts = [
        Script(chunks=[1]),
        Script(chunks=[1, 2], gap_s=0.01, server_timestamps=server_times),
        Script(kind="status", status=503),
        Script(chunks=[3]),
        Script(chunks=[1, 1, 1], usage=False),
    ]
    with SSEServer(scripts) as server:
        cfg = config(server.url, "workload.max_concurrency=1")
        result = run_benchmark(cfg, tmp_path / "run")
    records = {r.id: r for r in load_requests(tmp_path / "run")}
    metrics = RunSummary.load(tmp_path / "run").to_dict()["metrics"]
    assert (metrics["completed"], metrics["failed"], metrics["total_output_tokens"]) == (3, 1, 9)
    assert result.summary.to_dict()["complete"]
    assert [records[k].output_len for k in "0123"] == [3, 0, 3, 3]
    assert records["1"].error == "HTTP 503: injected failure"
    assert len(arrival_gaps(records["0"].token_times)) == 1  # a chunk of two tokens is one arrival
    assert records["2"].first_token_time == records["2"].token_times[-1]  # one chunk of three
    # the server's times moved onto the run's clock by the same shift
    shifted = records["0"].server_timestamps
    shift = shifted["t_queued"] - 1.0
    assert shifted["t_token_handed"] == pytest.approx([2.0 + shift, 2.5 + shift])
    line = json.loads((tmp_path / "run" / "requests.jsonl").read_text().splitlines()[1])
    assert "server_timestamps" not in line  # only requests that carried them


@pytest.fixture
def bpe_file(tmp_path):
    """A small byte-level BPE: random ids decode to text whose re-encoding merges differently."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    words = ["the cat sat on the mat", "über straße naïve café", "日本語 テキスト 🙂 emoji"] * 30
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(words, trainer)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_text_prompts_encode_to_exactly_the_requested_length(bpe_file):
    import numpy as np
    from tokenizers import Tokenizer

    from llmbench.backends.prompt_text import PromptText

    cfg = config("http://x/v1", f"model.tokenizer={bpe_file}", "backend.prompt_format=text")
    text = PromptText(cfg)
    tokenizer = Tokenizer.from_file(str(bpe_file))
    rng = np.random.default_rng(0)
    mismatched = 0
    for n in (1, 2, 7, 64, 300):
        ids = rng.integers(0, 400, n).tolist()
        mismatched += len(tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False).ids) != n
        sent, sent_ids = text.of_tokens(ids)
        assert tokenizer.encode(sent, add_special_tokens=False).ids == sent_ids and len(sent_ids) == n
    assert mismatched  # the plain decode would have been off for some


def test_text_prompt_format_sends_text(bpe_file):
    with SSEServer() as server:
        backend = connected(server.url, f"model.tokenizer={bpe_file}", "backend.prompt_format=text")
        try:
            drive(backend, 1)
        finally:
            backend.close()
        with pytest.raises(ValueError, match="no tokenizer at"):
            connected(server.url, "backend.prompt_format=text", "model.tokenizer=/no/tokenizer.json")
    assert isinstance(server.bodies[0]["prompt"], str)


def test_more_streams_than_the_default_open_file_limit():
    import resource

    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limits[1] != resource.RLIM_INFINITY and limits[1] < 1024:
        pytest.skip("the hard open-file limit is below the test's streams")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, limits[1]))
    try:
        with SSEServer([Script(chunks=[1, 1], gap_s=0.05) for _ in range(400)]) as server:
            backend = connected(server.url)  # client and server sockets: 800 descriptors at once
            try:
                outputs = drive(backend, 400)
            finally:
                backend.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    assert all(out[-1].error is None and out[-1].finished for out in outputs.values())


def test_chat_deltas_and_a_remote_servers_clock():
    from llmbench.backends.openai_stream import StreamReader

    reader = StreamReader("r", chat=True)
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    assert reader.feed(json.dumps(role), 1.0) == []  # no text: no arrival
    two = {"choices": [{"delta": {"content": "ab"}, "token_ids": [5, 6], "finish_reason": "stop"}]}
    times = {"t_queued": 100.0, "t_scheduled": 100.5, "t_first_token": 101.0, "t_token_handed": [101.0]}
    # the server's wall clock is its perf_counter + 1000 s; ours is our perf_counter + 10 s
    two["server_timestamps"] = {**times, "wall_offset": 1000.0}
    (output,) = reader.feed(json.dumps(two), 2.0)
    assert output.new_token_ids == [5, 6] and output.t_emit == 2.0
    final = reader.finished(wall_offset=10.0)
    assert final.finish_reason.value == "stop" and final.new_token_ids == [] and final.t_emit == 2.0
    assert final.server_timestamps == {
        "t_queued": 1090.0,
        "t_scheduled": 1090.5,
        "t_first_token": 1091.0,
        "t_token_handed": [1091.0],
    }
