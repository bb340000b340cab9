"""`backend.type: openai`: the workload streamed to any OpenAI-compatible server over HTTP.

The streams run on an asyncio loop of their own (uvloop where installed), each on a keep-alive
connection of the loop's with httptools parsing its response (http_stream.py; aiohttp, and httpx
before it, cost the loop more per stream and per event): in a thread of the runner's process, with
backend.workers > 1 in worker processes (openai_workers.py), or with backend.ray_address in Ray actors
over a cluster's hosts (openai_ray.py). The runner hands each request HAND_AHEAD_S before it is due,
and the loop starts it at its time, its connection opened meanwhile. That loop only reads and stamps
(openai_loop.py); poll(), on the runner's thread, parses what was read (openai_stream.py), so no stamp
waits behind another stream's JSON, and each output carries the time its bytes were read, which the
runner records. A request that cannot connect, gets an HTTP error or a malformed chunk, or whose
stream stalls past workload.request_timeout_s fails alone with its reason; the run goes on. A run
checks the server before its load (preflight.py, called by make_backend)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec

from llmbench.backends.base import ModelInfo
from llmbench.backends.client_capacity import choose_workers
from llmbench.backends.openai_loop import StreamSettings, ThreadLoop
from llmbench.backends.openai_request import RequestForm, auth_headers
from llmbench.backends.openai_stream import StreamParser
from llmbench.backends.openai_workers import WorkerPool
from llmbench.backends.prompt_text import PromptText
from llmbench.config.schema import RunConfig
from llmbench.engine.loading.source import model_shape, resolve_max_model_len
from llmbench.engine.request import RequestOutput, SamplingParams

logger = logging.getLogger(__name__)

POLL_WAIT_S = 0.001  # poll() waits this long for a chunk: short, so a due submit is never held back
# requests are handed to the stream loops this long before they are due, and each loop starts them at
# their time, their connections opened meanwhile: a closed loop's first window of 1,024 took the runner
# ~15-30 ms to prepare, which its last request waited through as schedule lag when handed at its due
# time. On 2 busy cores opening 512 connections took past 100 ms at times (the mock accepting them on
# the same cores); 250 ms had them open in each try
HAND_AHEAD_S = 0.25


class OpenAIBackend:
    profiles_own_steps = True  # engine steps run in the server
    stamps_outputs = True
    keeps_concurrency = True  # each stream loop keeps its share (openai_loop.py, openai_worker_set.py)
    hands_ahead_s = HAND_AHEAD_S

    def start(self, config: RunConfig) -> None:
        self.connect(config, config.backend.url)

    def connect(self, config: RunConfig, url: str, token_ids: bool = False) -> None:
        """Talk to the server at base URL `url` (ending in /v1) with the run's backend settings;
        `token_ids`: ask for each chunk's token ids (`return_token_ids`, which ours and recent vLLM take)."""
        logging.getLogger("httpx").setLevel(logging.WARNING)  # the model-card probe's request line
        backend = config.backend
        headers = auth_headers(backend.api_key_env)
        self._url = url.rstrip("/")
        # a mix's first model stands for the rest in the model facts: they share the base model
        named = backend.model or (backend.models[0].name if backend.models else None)
        card = self._model_card(named, headers)
        self._form = RequestForm(
            named or card["id"],
            chat=backend.endpoint == "chat",
            ignore_eos=config.workload.ignore_eos,
            include_usage=backend.include_usage,
            token_ids=token_ids,
        )
        shape = model_shape(config.model)
        max_len = card.get("max_model_len") or resolve_max_model_len(config.engine.max_model_len, shape)
        self.model_info = ModelInfo.from_shape(shape, max_len)
        self.served_model = None if backend.models else self._form.model  # a mix: summary.json's models
        self._text = PromptText(config) if backend.prompt_format == "text" else None
        self._save = config.output.save_tokens
        self._encode = msgspec.json.Encoder().encode
        self._parsers: dict[str, StreamParser] = {}  # submitted, neither finished nor aborted
        # server times are perf_counter seconds of the server plus its wall-clock offset; ours maps back
        self._wall_offset = time.time() - time.perf_counter()
        timeout = config.workload.request_timeout_s
        # every loop starts a closed loop's next request the moment one of its streams ends, without
        # waiting for this thread (openai_loop.py); workers split max_concurrency between them
        settings = StreamSettings(
            self._url + self._form.path, headers, timeout or 30.0, timeout, config.workload.max_concurrency
        )
        if backend.ray_address:
            from llmbench.backends.openai_ray import RayWorkers  # Ray is an extra: imported where asked for

            self._streams = RayWorkers(
                backend.workers, config.workload, settings, backend.ray_address, backend.ray_connect_timeout_s
            )
            return
        workers = choose_workers(backend.workers, config.workload)
        logger.info("client: %s", workers.reason)
        self._streams = WorkerPool(workers.count, settings) if workers.count > 1 else ThreadLoop(settings)

    def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        due: float | None = None,
        model: str | None = None,
    ) -> None:
        """`due`: when the stream may start (perf_counter; None: now); a loop that keeps the concurrency
        starts it then or once a slot opens, and says which in the request's first output. `model`: the
        served model it asks for (backend.models), else the run's."""
        sent = self._text.of_tokens(prompt_token_ids) if self._text else None
        prompt = sent[0] if sent else prompt_token_ids
        # the text sent goes back to the request's row only where its tokens are saved
        self._parsers[request_id] = StreamParser(request_id, self._form.chat, sent if self._save else None)
        # serialized here, on the runner's thread: the stream loop only sends the bytes
        body = self._encode(self._form.body(prompt, params, model))
        self._streams.start(request_id, body, time.perf_counter() if due is None else due)

    def poll(self, while_waiting: Callable[[], object] | None = None) -> list[RequestOutput]:
        # the starts submitted since the last poll go first: the runner's work below (a server's step
        # records fetched over HTTP) took 20-30 ms, which a held start waited through and its request
        # recorded as schedule lag
        self._streams.send_pending()
        if while_waiting is not None:  # the streams run on their own loop meanwhile
            while_waiting()
        outputs = []
        for request_id, stamp, data in self._streams.receive(POLL_WAIT_S):
            parser = self._parsers.get(request_id)
            if parser is None:
                continue  # aborted, or failed on an earlier chunk: the rest of its stream is dropped
            outputs += parser.take(stamp, data, self._wall_offset)
            if parser.done:
                del self._parsers[request_id]
                if isinstance(data, bytes):  # a chunk failed it while the stream goes on: close that
                    self._streams.cancel(request_id)
        return outputs

    def abort(self, request_id: str) -> None:
        # closing the stream is how a client aborts: the server drops the request and frees its blocks
        if self._parsers.pop(request_id, None) is not None:
            self._streams.cancel(request_id)

    def has_unfinished(self) -> bool:
        return bool(self._parsers)

    def check_empty(self) -> None:
        assert not self._parsers, f"{len(self._parsers)} requests unfinished"

    def drain_step_records(self) -> list:
        return []  # the server's engine steps are not visible over HTTP

    def client_usage(self) -> list[dict]:
        return self._streams.usage()

    def close(self) -> None:
        self._streams.close()

    def _model_card(self, model: str | None, headers: dict[str, str]) -> dict:
        """GET <url>/models: the served model (its name, and max_model_len where vLLM or we give it)."""
        import httpx

        try:
            response = httpx.get(f"{self._url}/models", headers=headers, timeout=30.0)
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
