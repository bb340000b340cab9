import dataclasses
import json
import time

import httpx
import openai
import pytest
from llmbench.engine.config import EngineConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams
from llmbench.engine.serving.engine_loop import RECORDS_EVERY_S
from llmbench.engine.serving.generation import Choice
from llmbench.engine.serving.responses import Shape

from tests.engine.helpers import TINY_CPU
from tests.engine.serving.servers import start_server

PROMPTS = [[(11 * i + j) % 500 + 3 for j in range(4 + 7 * i)] for i in range(3)]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def expected():
    """Greedy tokens of PROMPTS from an in-process engine, 12 each."""
    engine = LLMEngine(EngineConfig(model=TINY_CPU))
    return engine.generate(PROMPTS, SamplingParams(max_tokens=12, ignore_eos=True))


def sse_chunks(response: httpx.Response) -> list[dict]:
    """The JSON events of a stream, asserting it ends with [DONE]."""
    events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_completions_match_the_engine_token_for_token(client, server, expected):
    response = client.completions.create(
        model="tiny",
        prompt=PROMPTS,
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert [c.token_ids for c in response.choices] == expected
    assert [c.text for c in response.choices] == [server.state.tokenizer.decode(ids) for ids in expected]
    assert [c.finish_reason for c in response.choices] == ["length"] * 3
    assert response.usage.prompt_tokens == sum(map(len, PROMPTS)) and response.usage.completion_tokens == 36
    for times in response.server_timestamps:
        assert (
            times["t_queued"] <= times["t_scheduled"] <= times["t_first_token"] <= times["t_token_handed"][0]
        )
        assert len(times["t_token_handed"]) == 12 and times["t_token_handed"] == sorted(
            times["t_token_handed"]
        )


def test_a_streamed_completion_is_the_whole_one_in_pieces(client, expected):
    stream = client.completions.create(
        model="tiny",
        prompt=PROMPTS[1],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    token_ids = [t for c in chunks if c.choices for t in c.choices[0].token_ids]
    assert token_ids == expected[1]
    assert (
        text
        == client.completions.create(
            model="tiny", prompt=PROMPTS[1], max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
        )
        .choices[0]
        .text
    )
    assert (
        chunks[-2].choices[0].finish_reason == "length"
        and len(chunks[-2].server_timestamps["t_token_handed"]) >= 1
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_chat_streamed_and_whole(client, server):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Привет! 你好 🎉"}]
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=10, temperature=0)
    assert whole.choices[0].message.role == "assistant" and whole.usage.completion_tokens <= 10
    rendered = server.state.tokenizer.render_chat(messages)
    assert whole.usage.prompt_tokens == len(server.state.tokenizer.encode(rendered, add_special_tokens=False))
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=10, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_a_chat_chunk_without_text_has_an_empty_delta_as_openai_sends_it():
    # the finish chunk of a stream whose last token brought no text (a stop token, say)
    choice = Choice(0, "r", [5], detokenizer=None, finish_reason="length")
    chunk = Shape(chat=True, model="tiny", return_token_ids=False).chunk_choice(choice, "", [], first=False)
    assert chunk["delta"] == {} and chunk["finish_reason"] == "length"
    first = Shape(chat=True, model="tiny", return_token_ids=False).chunk_choice(choice, "", [], first=True)
    assert first["delta"] == {"role": "assistant", "content": ""}


def test_a_stop_string_ends_the_text_before_it(client):
    free = client.completions.create(
        model="tiny", prompt=PROMPTS[0], max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    stop = free.choices[0].text[3:5]
    stopped = client.completions.create(
        model="tiny",
        prompt=PROMPTS[0],
        max_tokens=12,
        temperature=0,
        stop=[stop],
        extra_body={"ignore_eos": True},
    )
    text = free.choices[0].text
    assert stopped.choices[0].text == text[: text.find(stop)] and stopped.choices[0].finish_reason == "stop"


BAD_REQUESTS = [
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": ', 400, "invalid JSON"),
    ("/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "many"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "temperature": -1}, 400, "temperature"),
    ("/v1/completions", {"prompt": "hi", "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt: empty prompt"),
    ("/v1/completions", {"prompt": []}, 400, "prompt: empty list"),
    ("/v1/completions", {"prompt": [3, 512]}, 400, "token id 512 is outside the vocabulary [0, 512)"),
    ("/v1/completions", {"prompt": [3, -1]}, 400, "prompt"),
    ("/v1/completions", {"prompt": [[3], [5, 9999]]}, 400, "prompt[1]: token id 9999"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 5000}, 400, "maximum context length is 2048"),
    ("/v1/completions", {"prompt": [3] * 2048}, 400, "prompt: 2048 tokens"),
    ("/v1/completions", {"prompt": "hi", "n": 2}, 400, "n: only 1 is supported"),
    ("/v1/completions", {"prompt": "hi", "min_tokens": 20, "max_tokens": 5}, 400, "min_tokens"),
    ("/v1/completions", {"prompt": "hi", "stop_token_ids": [600]}, 400, "stop_token_ids: 600"),
    ("/v1/completions", {"prompt": "hi", "seed": 2**64}, 400, "seed"),  # msgpack carries 64 bits
    ("/v1/completions", {"prompt": "hi", "top_k": 2**63}, 400, "top_k"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 2}, 400, "logprobs: not supported"),
    ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}, 404, "the model `gpt-4` does not exist"),
    ("/v1/completions", {"max_tokens": 3}, 400, "prompt: Field required"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, 400, "messages.0"),
    ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, "role"),
    ("/detokenize", {"tokens": [1, 600]}, 400, "tokens: 600 is outside the vocabulary"),
    ("/tokenize", {}, 400, "give either prompt or messages"),
    ("/v1/nothing", {}, 404, "Not Found"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), BAD_REQUESTS)
def test_bad_input_is_a_4xx_with_a_message(server, path, body, status, message):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    for stream in (False, True):
        if isinstance(body, dict) and path.startswith("/v1/c"):
            content = json.dumps({**body, "stream": stream}).encode()
        response = httpx.post(
            server.url + path, content=content, headers={"content-type": "application/json"}
        )
        assert response.status_code == status, response.text
        assert message in response.json()["error"]["message"]


def test_an_unknown_model_is_a_not_found_error_as_vllm_names_it(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-4", prompt="hi", max_tokens=2)
    assert caught.value.body["type"] == "NotFoundError" and caught.value.body["code"] == 404


def test_unknown_fields_are_ignored_and_the_server_still_serves(server):
    body = {"prompt": [5, 6], "max_tokens": 2, "no_such_field": {"x": 1}, "frequency_penalty": 0}
    response = httpx.post(server.url + "/v1/completions", json=body)
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] <= 2
    assert server.check_empty() is None


def engine_steps(server) -> float:
    """Engine steps recorded so far (none before the first drain)."""
    labels = {"model_name": "tiny"}
    return server.state.metrics.registry.get_sample_value("llmbench:step_cpu_ms_count", labels) or 0.0


@pytest.fixture(params=["in process", "split core"])
def any_server(request, server):
    if request.param == "in process":
        yield server
        return
    split = start_server(process_split=True)
    yield split
    split.stop()


def test_usage_counts_cached_prompt_tokens_until_the_cache_is_reset(any_server):
    server = any_server
    # 80 tokens: four full 16-token blocks, of which the last token's is never served from cache
    body = {"prompt": [(7 * j) % 500 + 3 for j in range(80)], "max_tokens": 2, "ignore_eos": True}

    def cached() -> int:
        response = httpx.post(server.url + "/v1/completions", json=body)
        return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    first = cached()
    assert cached() == 64 and first < 64  # the repeat finds the first's four full blocks but the last
    assert httpx.post(server.url + "/reset_prefix_cache").status_code == 200
    assert cached() == 0
    assert server.check_empty() is None


def test_a_disconnect_mid_stream_aborts_the_request_and_frees_its_blocks(server):
    body = {"prompt": PROMPTS[2], "max_tokens": 2000, "ignore_eos": True, "stream": True}
    steps_before = engine_steps(server)
    with httpx.stream("POST", server.url + "/v1/completions", json=body) as response:
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received == 3:
                break  # leave with the request mid-way: closing the connection is the abort
    assert server.check_empty() is None
    time.sleep(2 * RECORDS_EVERY_S)  # the engine's last step records reach the metrics
    assert engine_steps(server) - steps_before < 200  # aborted, not run on to its 2,000 tokens
    assert httpx.get(server.url + "/health").status_code == 200


def test_tokenize_detokenize_models_and_metrics(server):
    text = "héllo 🎉 мир"
    tokens = httpx.post(server.url + "/tokenize", json={"prompt": text}).json()
    assert (
        tokens["count"] == len(tokens["tokens"])
        and tokens["tokens"][0] == 1
        and tokens["max_model_len"] == 2048
    )
    assert httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json() == {
        "prompt": text
    }
    chat = httpx.post(server.url + "/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert server.state.tokenizer.decode(chat["tokens"]) == "<|user|>\nhi\n<|assistant|>\n"
    card = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert card["id"] == "tiny" and card["max_model_len"] == 2048
    httpx.post(
        server.url + "/v1/completions", json={"prompt": [7, 8, 9], "max_tokens": 3, "ignore_eos": True}
    )
    metrics = httpx.get(server.url + "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.text.splitlines()
        if line and not line.startswith("#")
    }
    assert values['vllm:generation_tokens_total{model_name="tiny"}'] >= 3
    assert values['vllm:time_to_first_token_seconds_count{model_name="tiny"}'] >= 1
    assert values['vllm:inter_token_latency_seconds_count{model_name="tiny"}'] >= 2
    assert 'vllm:num_requests_running{model_name="tiny"}' in values


def test_a_chat_template_that_refuses_the_messages_is_a_400(server, tmp_path):
    from tests.engine.serving.chat_templates import LLAMA3_STYLE_TEMPLATE
    from tests.engine.serving.servers import RunningServer

    server.state.tokenizer.tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": LLAMA3_STYLE_TEMPLATE}))
    model = dataclasses.replace(TINY_CPU, tokenizer=str(tmp_path / "tokenizer.json"))
    templated = RunningServer(EngineConfig(model=model))
    try:
        messages = [{"role": "robot", "content": "hi"}]
        for path, body in (
            ("/v1/chat/completions", {"messages": messages}),
            ("/tokenize", {"messages": messages}),
        ):
            response = httpx.post(templated.url + path, json=body)
            assert response.status_code == 400 and "unknown role robot" in response.json()["error"]["message"]
        ok = httpx.post(
            templated.url + "/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}
        ).json()
        assert templated.state.tokenizer.decode(ok["tokens"], skip_special_tokens=False).startswith(
            "<|begin_of_text|><|start_header_id|>user"
        )
    finally:
        templated.stop()


def test_a_stream_of_several_prompts_finishing_together_ends_every_choice(server):
    """Both choices finish in the same engine step, so one wake-up brings both final outputs: each gets
    its finishing chunk before the usage and [DONE] (a single choice's ride in one write)."""
    for prompts in ([[5, 6, 7], [8, 9]], [[5, 6, 7]]):
        body = {"prompt": prompts, "max_tokens": 3, "ignore_eos": True, "stream": True}
        body["stream_options"] = {"include_usage": True}
        lines = httpx.post(server.url + "/v1/completions", json=body).text.splitlines()
        events = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        ends = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks if c["choices"]}
        assert ends == dict.fromkeys(range(len(prompts)), "length")
        assert chunks[-1]["usage"]["completion_tokens"] == 3 * len(prompts)
    assert server.check_empty() is None
