"""One HTTP request's generation: an engine request per prompt (a choice), each output detokenized
into a text delta, stop strings applied, the engine's timestamps kept for the response. The HTTP layer
(engine/serving/api_server.py) turns the deltas into OpenAI's JSON."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams
from llmbench.engine.serving.detokenizer import IncrementalDetokenizer
from llmbench.engine.serving.engine_loop import EngineLoop
from llmbench.engine.serving.metrics import ServerMetrics
from llmbench.engine.serving.tokenizer import TextTokenizer
from starlette.requests import Request

# the server's perf_counter plus this is its wall clock: clients on other machines map our times with it
WALL_OFFSET = time.time() - time.perf_counter()
FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.ABORT: "abort"}


class RequestRejected(ValueError):
    """The engine refused the request (it can never fit, or its input is unusable): a 400."""


class ClientGone(Exception):
    """The client disconnected while its request was in the engine."""


@dataclass
class Choice:
    index: int
    request_id: str
    prompt_token_ids: list[int]
    detokenizer: IncrementalDetokenizer
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    t_queued: float = 0.0
    t_scheduled: float | None = None
    t_first_token: float | None = None  # when the first token left the engine's output processing
    t_token_handed: list[float] = field(default_factory=list)  # each output with tokens reaching the server
    cached_tokens: int = 0  # prompt tokens the prefix cache held

    def server_timestamps(self) -> dict:
        return {
            "t_queued": self.t_queued,
            "t_scheduled": self.t_scheduled,
            "t_first_token": self.t_first_token,
            "t_token_handed": self.t_token_handed,
            "wall_offset": WALL_OFFSET,
        }


class Generation:
    def __init__(
        self,
        engine: EngineLoop,
        tokenizer: TextTokenizer,
        metrics: ServerMetrics,
        prompts: list[list[int]],
        params: SamplingParams,
        stop: list[str],
        prefix: str,
    ):
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.engine, self.metrics, self.params = engine, metrics, params
        self.choices = [
            Choice(i, f"{self.id}-{i}", prompt, IncrementalDetokenizer(tokenizer, prompt, stop))
            for i, prompt in enumerate(prompts)
        ]
        self.queue: asyncio.Queue = asyncio.Queue()  # this request's outputs, from the engine loop
        self._unfinished = len(prompts)

    def start(self) -> None:
        """Hand the prompts to the engine; EngineDeadError when it is gone."""
        for choice in self.choices:
            self.engine.add(choice.request_id, choice.prompt_token_ids, self.params, self.queue, choice.index)
            choice.t_queued = time.perf_counter()

    async def deltas(self, request: Request) -> AsyncIterator[tuple[Choice, str, list[int]]]:
        """(choice, new text, new token ids) per wake-up and choice, until every choice has finished.
        Raises RequestRejected, EngineDeadError, or ClientGone (after aborting what is left).

        Every output already waiting is taken at once and a choice's outputs merge into one delta (one
        SSE chunk): a stream whose client or handler fell behind catches up in one write instead of
        paying the per-chunk cost (a task wake-up, an encode, a trip down the ASGI stack) per token,
        as vLLM's server does. A stream that keeps up still gets each output on its own."""
        watcher = asyncio.create_task(self._watch(request))
        queue = self.queue
        try:
            while self._unfinished:
                items = [await queue.get()]
                while not queue.empty():
                    items.append(queue.get_nowait())
                merged: dict[int, tuple[Choice, list[str], list[int]]] = {}
                error: Exception | None = None
                for item in items:
                    if isinstance(item, Exception):
                        error = item
                        break
                    index, output, handed = item
                    choice = self.choices[index]
                    if choice.finish_reason is not None:
                        continue  # queued behind its stop string: the choice is complete
                    try:
                        text = self._apply(choice, output, handed)
                    except RequestRejected as e:
                        error = e
                        break
                    _, texts, token_ids = merged.setdefault(index, (choice, [], []))
                    texts.append(text)
                    token_ids += output.new_token_ids
                # what arrived before an error still reaches the client, as it did one output at a time
                for choice, texts, token_ids in merged.values():
                    yield choice, "".join(texts), token_ids
                if error is not None:
                    raise error
        finally:
            watcher.cancel()
            self.abort()

    @property
    def finished(self) -> bool:
        """Every choice has its finish reason: deltas() has nothing more to give."""
        return not self._unfinished

    def abort(self) -> None:
        """Drop every choice still in the engine (a no-op for finished ones)."""
        for choice in self.choices:
            if choice.finish_reason is None:
                self.engine.abort(choice.request_id)

    async def _watch(self, request: Request) -> None:
        """Wake the request with ClientGone when its client disconnects. One pending receive() per
        request, not a poll: polling is_disconnected() cost more than serving at 1,000 streams."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.queue.put_nowait(ClientGone())

    def _apply(self, choice: Choice, output: RequestOutput, handed: float) -> str:
        if output.finish_reason in (FinishReason.ERROR, FinishReason.REJECTED):
            raise RequestRejected(output.error)
        if output.t_scheduled is not None and choice.t_scheduled is None:
            choice.t_scheduled = output.t_scheduled
        delta = ""
        # a request's first output and its last carry the count; a plain decode's, none (0)
        choice.cached_tokens = max(choice.cached_tokens, output.num_cached_tokens)
        if output.new_token_ids:
            choice.t_first_token = choice.t_first_token or output.t_emit
            choice.t_token_handed.append(handed)
            choice.token_ids += output.new_token_ids
            delta = choice.detokenizer.add(output.new_token_ids)
        if choice.detokenizer.stopped and not output.finished:
            self.engine.abort(choice.request_id)  # a stop string: the engine need not go on
            output.finished, output.finish_reason = True, FinishReason.STOP
        if output.finished:
            delta += choice.detokenizer.flush()
            choice.finish_reason = (
                "stop" if choice.detokenizer.stopped else FINISH_REASONS[output.finish_reason]
            )
            self._unfinished -= 1
            self.metrics.observe_request(
                choice.t_queued,
                choice.t_token_handed,
                len(choice.prompt_token_ids),
                len(choice.token_ids),
                choice.finish_reason,
                choice.cached_tokens,
            )
        choice.text += delta
        return delta

    def usage(self) -> dict:
        prompt = sum(len(c.prompt_token_ids) for c in self.choices)
        completion = sum(len(c.token_ids) for c in self.choices)
        cached = sum(c.cached_tokens for c in self.choices)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
