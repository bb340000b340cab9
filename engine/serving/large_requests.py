"""What one large request may cost everyone else. Its body is bounded (serve.max_body_bytes): past the
bound it is a 413 with OpenAI's error body, refused from its Content-Length before any of it is kept, or,
for a body sent in chunks, as soon as it passes the bound. A large body is tokenized on a worker thread,
so the event loop goes on serving /health and the other streams meanwhile. Without either, a client's
50 MB prompt held the server for nine minutes (9.8 GB of memory) while /health timed out throughout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from llmbench.engine.serving.responses import error_body
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# the default leaves room for a prompt of max_model_len tokens in any form a client may send it: token
# ids (at most 8 bytes each in JSON), text (a few bytes a token; a \uXXXX escape is 6 bytes a
# character), with 1 MiB for the messages' framing and the other fields
BYTES_PER_TOKEN = 32
FRAMING_BYTES = 1 << 20
# a smaller body is tokenized on the event loop: it takes less time there than the hop to a thread
INLINE_BODY_BYTES = 1 << 16

T = TypeVar("T")


def default_max_body_bytes(max_model_len: int) -> int:
    return BYTES_PER_TOKEN * max_model_len + FRAMING_BYTES


class BodyLimit:
    """ASGI middleware around the app."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes
        self.message = f"request body: more than {max_bytes:,} bytes, the most this server takes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((int(v) for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None:  # the server never hands the app more than the Content-Length says
            if length > self.max_bytes:
                # the rest of the body is read and dropped by the server, so the client, still
                # sending, gets this answer instead of a reset connection
                response = JSONResponse(error_body(self.message, 413, "HTTPError"), status_code=413)
                await response(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # an HTTPException: FastAPI passes it through its body parsing to the app's handler
                raise HTTPException(413, self.message)
            return message

        await self.app(scope, counted, send)


async def off_the_loop(request: Request, work: Callable[..., T], *args: object) -> T:
    """work(*args), on a worker thread when the request's body is large or of unknown length: a 5.4 MB
    prompt tokenized on the event loop held /health for 18 s. The tokenizer releases the GIL on long
    inputs (engine/serving/tokenizer.py), so the loop does not wait for the thread either."""
    length = request.headers.get("content-length")
    if length is not None and int(length) <= INLINE_BODY_BYTES:
        return work(*args)
    return await asyncio.to_thread(work, *args)
