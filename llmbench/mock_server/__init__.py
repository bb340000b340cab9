"""A mock OpenAI-compatible server of known latency that records what it actually sent: the judge of a
benchmark client.

It streams `/v1/completions` and `/v1/chat/completions` as SSE (with `stream_options.include_usage`'s
usage chunk), takes token-id and text prompts, and lists its models at `/v1/models`. A request's
first chunk is due `ttft_ms` after it arrived, then one chunk of `tokens_per_chunk` tokens every
`tokens_per_chunk x itl_ms`, `output_tokens` in all (fewer if the request's max_tokens says so). Every
write's time is recorded on CLOCK_MONOTONIC, the clock every process of the host shares (Python's
time.monotonic and time.perf_counter on Linux), so a client's stamps compare with it directly.

A reasoning phase (`reasoning_tokens`) streams a chat answer's first tokens as `reasoning_content` (or
`reasoning`: `reasoning_field`) and counts them in usage's `completion_tokens_details`; with
`spec_draft_tokens`, `GET /metrics` serves vLLM's speculative-decoding counters, each chunk one draft.

Refusals, to try a client's preflight: `text_only` (token-id prompts get HTTP 400, as from TGI or
GuideLLM's mock), `no_stream_options` (a body with stream_options gets 400), `prefix` (the API lives
under that path only, so a client with the wrong base URL gets 404), and any model name but `model`
(404, as vLLM answers); `lora_modules` adds names served beside `model`, as vLLM serves LoRA adapters.

    with MockServer(MockSettings(ttft_ms=50, itl_ms=10)) as mock:
        ...  # drive a client at mock.url (http://127.0.0.1:PORT/v1)
        latencies = sent_latencies(mock.records())

From a shell: `python -m llmbench.mock_server --ttft-ms 50 --itl-ms 10 --port 8000`. `GET /_mock/records`
returns the records as JSON, `POST /_mock/reset` clears them. It runs on uvloop where installed, in one
process, bound to 127.0.0.1."""

from llmbench.mock_server.judge import SentLatencies, sent_latencies
from llmbench.mock_server.launcher import MockServer
from llmbench.mock_server.settings import MockSettings
from llmbench.mock_server.streams import StreamRecord

__all__ = ["MockServer", "MockSettings", "SentLatencies", "StreamRecord", "sent_latencies"]
