"""A protocol-level OpenAI-style SSE server for client tests: raw HTTP/1.1 over asyncio on 127.0.0.1,
chunked transfer, with a scripted behaviour per request (in the order requests arrive) so faults can be
injected where a real server would never put them."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field

MODEL = "fake-model"


@dataclass
class Script:
    """How to answer one completion request."""

    kind: str = "ok"  # ok, status, malformed, stall, disconnect, error_chunk, no_finish
    chunks: list[int] = field(default_factory=lambda: [1, 1, 1])  # tokens per chunk (ok)
    status: int = 500
    gap_s: float = 0.0  # between chunks
    empty_first: bool = False  # an empty-text chunk first (a role-only delta, held-back UTF-8)
    usage: bool = True
    server_timestamps: dict | None = None


class SSEServer:
    def __init__(self, scripts: list[Script] | None = None, max_model_len: int | None = None):
        self.scripts = list(scripts or [])
        self.max_model_len = max_model_len
        self.bodies: list[dict] = []  # every completion request body, in arrival order
        self.headers: list[dict] = []
        self.closed = 0  # connections closed by the client while streaming
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SSEServer:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _stop(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ")
                headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if method == "GET" and path == "/v1/models":
                    card = {"id": MODEL, "object": "model"}
                    if self.max_model_len:
                        card["max_model_len"] = self.max_model_len
                    await _send(writer, 200, json.dumps({"object": "list", "data": [card]}))
                    continue
                self.bodies.append(json.loads(body))
                self.headers.append(headers)
                script = self.scripts.pop(0) if self.scripts else Script()
                if not await self._complete(writer, script):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed += 1
        finally:
            writer.close()

    async def _complete(self, writer: asyncio.StreamWriter, script: Script) -> bool:
        """Answer one request; False when the connection is to be dropped."""
        if script.kind == "status":
            await _send(writer, script.status, json.dumps({"error": {"message": "injected\nfailure"}}))
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )

        async def event(data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            await writer.drain()

        if script.empty_first:
            await event(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": None}]}))
        if script.kind == "malformed":
            await event("{not json")
        if script.kind == "error_chunk":
            await event(json.dumps({"error": {"message": "engine core died", "code": 500}}))
        for i, n in enumerate(script.chunks):
            await asyncio.sleep(script.gap_s)
            last = i == len(script.chunks) - 1 and script.kind != "no_finish"
            choice = {"index": 0, "text": "x" * n, "finish_reason": "length" if last else None}
            await event(json.dumps({"choices": [choice]}))
            if script.kind == "stall":
                await asyncio.sleep(30)
            if script.kind == "disconnect":
                return False
        if script.usage:
            usage = {"prompt_tokens": 1, "completion_tokens": sum(script.chunks)}
            final = {"choices": [], "usage": usage}
            if script.server_timestamps:
                final["server_timestamps"] = script.server_timestamps
            await event(json.dumps(final))
        await event("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


async def _send(writer: asyncio.StreamWriter, status: int, body: str) -> None:
    data = body.encode()
    writer.write(
        b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status, len(data), data)
    )
    await writer.drain()
