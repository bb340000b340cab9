"""The mock's HTTP/1.1: a bare asyncio protocol (keep-alive, content-length bodies, chunked responses)
and the routes of an OpenAI-compatible server. No framework: the mock judges clients faster than any
Python server built on one could serve them, so it must cost less than they do."""

from __future__ import annotations

import asyncio
import json
import time

from llmbench.mock_server.settings import MockSettings
from llmbench.mock_server.streams import CREATED, TOKEN_TEXT, Scheduler, SpecCounters, Stream, StreamRecord

MAX_HEAD = 64 * 1024
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Too Large"}
REASONS[422] = "Unprocessable Entity"
# the body fields of OpenAI's own API that llmbench sends (openai_fields_only refuses any other)
OPENAI_FIELDS = {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p"}
OPENAI_FIELDS |= {"stream", "stream_options", "stop", "seed", "n", "user"}
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class MockApp:
    """The routes, the records of every completion request, and the one scheduler of their streams."""

    def __init__(self, settings: MockSettings, loop: asyncio.AbstractEventLoop):
        self.settings = settings
        self.records: list[StreamRecord] = []
        self.scheduler = Scheduler(loop)
        self.spec = SpecCounters(settings.spec_draft_tokens) if settings.spec_draft_tokens else None
        self._loop = loop
        prefix = settings.prefix.rstrip("/")
        self._models = prefix + "/models"
        self._served = set(settings.served)
        self._completions = {prefix + "/completions": False, prefix + "/chat/completions": True}

    def handle(self, conn: Connection, method: str, path: str, body: bytes, received: float) -> None:
        path = path.split("?", 1)[0]
        if path in self._completions:
            if method != "POST":
                return conn.respond(405, {"detail": "Method Not Allowed"})
            return self._complete(conn, path, body, received)
        if method == "GET" and path == self._models:
            cards = [
                {"id": name, "object": "model", "created": CREATED, "owned_by": "llmbench", "root": name}
                | {"max_model_len": self.settings.max_model_len}
                for name in self.settings.served
            ]
            return conn.respond(200, {"object": "list", "data": cards})
        if method == "GET" and path == "/health":
            return conn.respond(200, {})
        if method == "GET" and path == "/metrics" and self.spec is not None:
            return conn.respond_text(200, self.spec.exposition())
        if method == "GET" and path == "/_mock/records":
            return conn.respond(200, [record.to_dict() for record in self.records])
        if method == "POST" and path == "/_mock/reset":
            self.records.clear()
            return conn.respond(200, {})
        if method == "POST":  # a completion sent under the wrong base URL is a request the client made
            self.records.append(StreamRecord(len(self.records), path, 404, received))
        conn.respond(404, {"detail": "Not Found"})

    def _complete(self, conn: Connection, path: str, raw: bytes, received: float) -> None:
        record = StreamRecord(len(self.records), path, 400, received)
        self.records.append(record)
        chat = self._completions[path]
        try:
            body = json.loads(raw)
            status, message = self._refusal(record, body, chat)
        except ValueError as e:
            status, message = 400, f"invalid JSON body: {e}"
        if status == 422:  # FastAPI's shape, as transformers serve answers
            record.status = status
            return conn.respond(status, {"detail": message})
        if status:
            record.status = status
            kind = "NotFoundError" if status == 404 else "BadRequestError"
            return conn.respond(status, {"error": {"message": message, "type": kind, "code": status}})
        record.status = 200
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        record.tokens = min(int(limit), self.settings.output_tokens) if limit else self.settings.output_tokens
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if body.get("stream"):
            stream = Stream(conn.transport, record, self.settings, chat, usage, self.spec)
            conn.begin_stream(stream)
            self.scheduler.add(stream)
        else:
            done_in = self.settings.ttft_ms / 1000 + (record.tokens - 1) * self.settings.itl_ms / 1000
            delay = max(0.0, received + done_in - time.monotonic())
            conn.busy = True
            self._loop.call_later(delay, self._answer_whole, conn, record, chat)

    def _refusal(self, record: StreamRecord, body, chat: bool) -> tuple[int, str]:
        """(status, message) of a request the mock refuses, else (0, ''); notes its prompt's form."""
        if not isinstance(body, dict):
            return 400, "invalid JSON body: expected an object"
        if body.get("model") not in self._served:
            return 404, f"The model `{body.get('model')}` does not exist."
        record.model = body["model"]
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return 400, "messages: expected a non-empty list"
            record.prompt = "text"
            record.prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                record.prompt, record.prompt_tokens = "text", len(prompt.split())
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                record.prompt, record.prompt_tokens = "ids", len(prompt)
                if self.settings.text_only:
                    return 400, "prompt: expected a string (this server takes no token ids)"
            else:
                return 400, "prompt: expected a string or a list of token ids"
        unexpected = set(body) - OPENAI_FIELDS
        if unexpected and self.settings.openai_fields_only:
            return 422, f"Unexpected fields in the request: {unexpected}"
        if "stream_options" in body and self.settings.no_stream_options:
            return 400, "stream_options: extra inputs are not permitted"
        return 0, ""

    def _answer_whole(self, conn: Connection, record: StreamRecord, chat: bool) -> None:
        text = TOKEN_TEXT * record.tokens
        choice = {"index": 0, "finish_reason": "length", "logprobs": None}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        usage = {"prompt_tokens": record.prompt_tokens, "completion_tokens": record.tokens}
        usage["total_tokens"] = record.prompt_tokens + record.tokens
        kind = "chat.completion" if chat else "text_completion"
        body = {"id": f"cmpl-{record.id}", "object": kind, "created": CREATED, "model": record.model}
        conn.respond(200, body | {"choices": [choice], "usage": usage})
        record.sends.append(time.monotonic())
        record.events.append(1)
        conn.busy = False
        conn.serve_buffered()


class Connection(asyncio.Protocol):
    """One client connection: requests parsed from its bytes, answered one at a time (HTTP/1.1)."""

    def __init__(self, app: MockApp):
        self.app = app
        self.buffer = bytearray()
        self.busy = False  # a response is under way: later requests wait in the buffer
        self.stream: Stream | None = None
        self.transport: asyncio.Transport | None = None
        self._close_after = False

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.closed = True

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.serve_buffered()

    def serve_buffered(self) -> None:
        received = time.monotonic()
        while not self.busy and not self.transport.is_closing():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self._fail(413)
                return
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            try:
                method, target, _version = lines[0].split(" ", 2)
            except ValueError:
                return self._fail(400)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", ""):
                return self._fail(400)  # no client of this mock sends a chunked request body
            length = int(headers.get("content-length") or 0)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            self._close_after = headers.get("connection", "").lower() == "close"
            self.app.handle(self, method, target, body, received)

    def respond(self, status: int, data) -> None:
        self._respond(status, json.dumps(data).encode(), "application/json")

    def respond_text(self, status: int, text: str) -> None:
        self._respond(status, text.encode(), "text/plain; version=0.0.4")  # Prometheus's exposition

    def _respond(self, status: int, body: bytes, kind: str) -> None:
        head = f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\ncontent-type: {kind}\r\n"
        self.transport.write(b"%scontent-length: %d\r\n\r\n%s" % (head.encode(), len(body), body))
        if self._close_after:
            self.transport.close()

    def begin_stream(self, stream: Stream) -> None:
        self.busy = True
        self.stream = stream
        stream.on_done = self._end_stream
        self.transport.write(SSE_HEAD)

    def _end_stream(self) -> None:
        self.busy = False
        self.stream = None
        if self._close_after:
            self.transport.close()
        else:
            self.serve_buffered()

    def _fail(self, status: int) -> None:
        self._close_after = True
        self.respond(status, {"detail": REASONS[status]})
