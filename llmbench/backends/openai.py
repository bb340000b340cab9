"""`backend.type: openai`: the workload streamed to any OpenAI-compatible server over HTTP.

An asyncio loop in a thread of its own runs one aiohttp stream per request, the client library vLLM's
and AIPerf's benchmarks use: with httpx, 256 streams opened at once reached the server only after
hundreds of milliseconds of the client's own work, and a benchmark's client must cost less than the
server it measures. The runner's thread submits into the loop and poll() hands over what arrived.
Each chunk is stamped when the client reads it, and the runner records that time, not its poll's;
openai_stream.py reads the chunks. A request that cannot connect, gets an HTTP error or a malformed
chunk, or whose stream stalls past workload.request_timeout_s fails alone with its reason; the run goes
on."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Callable

from llmbench.backends.base import ModelInfo, ServedOutput
from llmbench.backends.openai_stream import RequestFailed, StreamReader, error_message
from llmbench.backends.prompt_text import PromptText
from llmbench.config.schema import RunConfig
from llmbench.engine.models.shape import model_shape, resolve_max_model_len
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams

logger = logging.getLogger(__name__)

POLL_WAIT_S = 0.001  # poll() waits this long for a chunk: short, so a due submit is never held back
OPEN_FILES = 65536  # the soft limit raised to this (or the hard limit) for one socket per stream
READ_BUFFER = 1 << 20  # bytes: an SSE line may be this long (aiohttp's default, 64 KiB, fails longer)


class OpenAIBackend:
    profiles_own_steps = True  # engine steps run in the server
    stamps_outputs = True

    def start(self, config: RunConfig) -> None:
        self.connect(config, config.backend.url)

    def connect(self, config: RunConfig, url: str, token_ids: bool = False) -> None:
        """Talk to the server at base URL `url` (ending in /v1) with the run's backend settings;
        `token_ids`: ask for each chunk's token ids (`return_token_ids`, which ours and recent vLLM take)."""
        logging.getLogger("httpx").setLevel(logging.WARNING)  # the model-card probe's request line
        backend = config.backend
        self._token_ids = token_ids
        self._url = url.rstrip("/")
        self._chat = backend.endpoint == "chat"
        self._ignore_eos = config.workload.ignore_eos
        self._headers = {}
        if backend.api_key_env:
            key = os.environ.get(backend.api_key_env)
            if not key:
                raise ValueError(f"backend.api_key_env: no environment variable {backend.api_key_env} set")
            self._headers["Authorization"] = f"Bearer {key}"
        card = self._model_card(backend.model)
        self._model = backend.model or card["id"]
        shape = model_shape(config.model)
        max_len = card.get("max_model_len") or resolve_max_model_len(config.engine.max_model_len, shape)
        self.model_info = ModelInfo.from_shape(shape, max_len)
        self._text = PromptText(config) if backend.prompt_format == "text" else None
        timeout = config.workload.request_timeout_s
        self._stall_s = timeout
        self._connect_s = timeout or 30.0
        self._outputs: queue.SimpleQueue[RequestOutput] = queue.SimpleQueue()
        self._live: set[str] = set()  # submitted, neither finished nor aborted (the runner's thread)
        self._tasks: dict[str, asyncio.Task] = {}  # the loop thread's
        # server times are perf_counter seconds of the server plus its wall-clock offset; ours maps back
        self._wall_offset = time.time() - time.perf_counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="openai-client", daemon=True)
        self._thread.start()
        self._client = self._call(self._open_client())

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self._live.add(request_id)
        body = self._body(prompt_token_ids, params)
        self._loop.call_soon_threadsafe(self._start_stream, request_id, body)

    def poll(self, while_waiting: Callable[[], object] | None = None) -> list[RequestOutput]:
        if while_waiting is not None:  # the streams run on their own thread meanwhile
            while_waiting()
        try:
            arrived = [self._outputs.get(timeout=POLL_WAIT_S)]
        except queue.Empty:
            return []
        while not self._outputs.empty():  # only this thread takes from the queue
            arrived.append(self._outputs.get_nowait())
        outputs = [o for o in arrived if o.request_id in self._live]  # not an aborted one's last chunks
        self._live.difference_update(o.request_id for o in outputs if o.finished)
        return outputs

    def abort(self, request_id: str) -> None:
        # closing the stream is how a client aborts: the server drops the request and frees its blocks
        self._live.discard(request_id)
        self._loop.call_soon_threadsafe(self._cancel, request_id)

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def check_empty(self) -> None:
        assert not self._live, f"{len(self._live)} requests unfinished"

    def drain_step_records(self) -> list:
        return []  # the server's engine steps are not visible over HTTP

    def close(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _model_card(self, model: str | None) -> dict:
        """GET <url>/models: the served model (its name, and max_model_len where vLLM or we give it)."""
        import httpx

        try:
            response = httpx.get(f"{self._url}/models", headers=self._headers, timeout=30.0)
            response.raise_for_status()
            cards = response.json()["data"]
        except httpx.InvalidURL as e:
            raise ValueError(f"backend.url: {e}") from None
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            if model is not None:  # not every server lists its models; the name is all we need
                logger.warning("GET %s/models failed (%s); using backend.model %s", self._url, e, model)
                return {"id": model}
            raise ValueError(f"backend.url: cannot list the models at {self._url}/models: {e}") from None
        named = [card for card in cards if card.get("id") == model] if model else cards[:1]
        if not named:
            raise ValueError(f"backend.model: {self._url} serves no model named {model!r}")
        return named[0]

    def _body(self, prompt: list[int], params: SamplingParams) -> dict:
        text = self._text.of_tokens(prompt) if self._text else None
        body = {
            "model": self._model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self._ignore_eos:  # vLLM's and SGLang's extension; OpenAI itself has no such parameter
            body["ignore_eos"] = True
        if params.top_k:  # the same servers' extension
            body["top_k"] = params.top_k
        if self._token_ids:
            body["return_token_ids"] = True
        if self._chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text if text is not None else prompt
        return body

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _open_client(self):
        import aiohttp

        # as many connections as streams (limit 0): the workload's concurrency is the client's, not a
        # pool's; sock_read None lets a stream stay silent as long as the runner's own timeout lets it
        _raise_open_file_limit()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect_s, sock_read=self._stall_s)
        return aiohttp.ClientSession(
            headers=self._headers,
            timeout=timeout,
            connector=aiohttp.TCPConnector(limit=0),
            read_bufsize=READ_BUFFER,
        )

    async def _shutdown(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self._client.close()

    def _start_stream(self, request_id: str, body: dict) -> None:
        self._tasks[request_id] = self._loop.create_task(self._stream(request_id, body))

    def _cancel(self, request_id: str) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    async def _stream(self, request_id: str, body: dict) -> None:
        import aiohttp

        stream = StreamReader(request_id, self._chat)
        path = "/chat/completions" if self._chat else "/completions"
        try:
            async with self._client.post(self._url + path, json=body) as response:
                if response.status >= 400:
                    detail = (await response.read()).decode(errors="replace")
                    raise RequestFailed(f"HTTP {response.status}: {error_message(detail)}")
                async for raw in response.content:  # one SSE line at a time
                    now = time.perf_counter()
                    line = raw.decode()
                    if not line.startswith("data:"):
                        continue  # SSE comments, event names, the blank line between events
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    for output in stream.feed(data, now):
                        self._outputs.put(output)
            self._outputs.put(stream.finished(self._wall_offset))
        except RequestFailed as e:
            self._fail(request_id, str(e))
        except aiohttp.ConnectionTimeoutError:
            self._fail(request_id, f"connection error: not connected within {self._connect_s:g} s")
        except aiohttp.SocketTimeoutError:  # only set with a request timeout
            self._fail(request_id, f"stream stalled: no data within request_timeout_s={self._stall_s:g}")
        except aiohttp.ClientError as e:
            self._fail(request_id, f"connection error: {type(e).__name__}: {e}")
        except Exception as e:  # a request that fails unseen would keep the run waiting for it forever
            logger.exception("request %s", request_id)
            self._fail(request_id, f"client error: {type(e).__name__}: {e}")
        finally:
            self._tasks.pop(request_id, None)

    def _fail(self, request_id: str, message: str) -> None:
        now = time.perf_counter()
        self._outputs.put(ServedOutput(request_id, [], True, FinishReason.ERROR, message, now))


def _raise_open_file_limit() -> None:
    """A socket a stream: thousands at once pass a default soft limit of 1024 (SGLang's client does this)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
