"""OpenAI's response JSON for a Generation: whole (stream false) or as server-sent events (stream true:
`data: {chunk}` events, the finished choice's chunk carrying `server_timestamps`, a last chunk with
`usage` when stream_options.include_usage, then `data: [DONE]`). An error after the stream has started
is one `data: {"error": ...}` event before [DONE], as vLLM sends it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from llmbench.engine.serving.engine_loop import EngineDeadError
from llmbench.engine.serving.generation import Choice, ClientGone, Generation, RequestRejected
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DONE = b"data: [DONE]\n\n"
encode = msgspec.json.Encoder().encode


# the error types vLLM's server names for each status (OpenAI's SDK raises its exceptions by status alone)
ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}


def error_body(message: str, status: int, kind: str | None = None) -> dict:
    kind = kind or ERROR_TYPES.get(status, "HTTPError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def event(data: dict) -> bytes:
    return b"data: " + encode(data) + b"\n\n"


class EventStreamResponse(StreamingResponse):
    """Starlette's streaming response without its second task per request listening for the client
    to leave (a task group, two tasks and a cancel scope, under uvicorn's ASGI 2.3): the Generation's
    own watcher already holds one receive() per request and ends the stream with ClientGone, and
    uvicorn drops what is sent after a disconnect."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


class Shape:
    """What differs between /v1/completions and /v1/chat/completions."""

    def __init__(self, chat: bool, model: str, return_token_ids: bool):
        self.chat, self.model, self.return_token_ids = chat, model, return_token_ids

    def head(self, generation: Generation, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": generation.id, "object": kind, "created": generation.created, "model": self.model}

    def chunk_choice(self, choice: Choice, text: str, token_ids: list[int], first: bool) -> dict:
        if self.chat:
            # OpenAI's finish chunk has an empty delta, not an empty content
            delta = {"role": "assistant", "content": text} if first else {"content": text} if text else {}
            body = {"index": choice.index, "delta": delta, "logprobs": None}
        else:
            body = {"index": choice.index, "text": text, "logprobs": None}
        body["finish_reason"] = choice.finish_reason
        if self.return_token_ids:
            body["token_ids"] = token_ids
        return body

    def whole_choice(self, choice: Choice) -> dict:
        if self.chat:
            message = {"role": "assistant", "content": choice.text}
            body = {"index": choice.index, "message": message, "logprobs": None}
        else:
            body = {"index": choice.index, "text": choice.text, "logprobs": None}
        body["finish_reason"] = choice.finish_reason
        if self.return_token_ids:
            body["token_ids"] = choice.token_ids
        return body


async def whole_response(shape: Shape, generation: Generation, deltas: AsyncIterator) -> dict:
    """The non-streamed response; server_timestamps is a list, one entry per choice."""
    async for _ in deltas:
        pass
    choices = generation.choices
    return {
        **shape.head(generation, chunk=False),
        "choices": [shape.whole_choice(c) for c in choices],
        "usage": generation.usage(),
        "server_timestamps": [c.server_timestamps() for c in choices],
    }


async def event_stream(
    shape: Shape, generation: Generation, first: tuple, deltas: AsyncIterator, include_usage: bool
) -> AsyncIterator[bytes]:
    """SSE events from the first delta (already awaited, so a rejection could still be a 400) on."""
    head = shape.head(generation, chunk=True)
    started: set[int] = set()
    # tokens whose text is held back (part of a character, maybe a stop string) ride on the next chunk
    unsent: dict[int, list[int]] = {}

    def usage() -> bytes:
        return event({**head, "choices": [], "usage": generation.usage()}) if include_usage else b""

    item = first
    try:
        while item is not None:
            choice, text, token_ids = item
            token_ids = unsent.pop(choice.index, []) + token_ids
            if text or choice.finish_reason is not None or (shape.chat and choice.index not in started):
                body = shape.chunk_choice(choice, text, token_ids, choice.index not in started)
                started.add(choice.index)
                chunk = {**head, "choices": [body]}
                if choice.finish_reason is not None:
                    chunk["server_timestamps"] = choice.server_timestamps()
                if generation.finished and len(generation.choices) == 1:
                    # its last chunk, the usage and [DONE] in one write: a send down the ASGI stack
                    # each was 8% of a one-token request's server CPU
                    await deltas.aclose()  # its watcher of the client goes now, not when collected
                    yield event(chunk) + usage() + DONE
                    return
                yield event(chunk)
            else:
                unsent[choice.index] = token_ids
            item = await anext(deltas, None)
        if include_usage:
            yield usage()
    except RequestRejected as e:
        yield event(error_body(str(e), 400))
    except EngineDeadError as e:
        yield event(error_body(str(e), 503))
    except ClientGone:
        return
    finally:
        generation.abort()
    yield DONE
