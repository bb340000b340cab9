"""The bare reference client of benchmarks/client_fidelity.py: the least a Python streaming client can do,
so that what another client adds shows against it.

One process, one event loop (uvloop where installed), no HTTP library: `--streams` slots, each with one
keep-alive connection of its own, open at once, each posting its next request the moment the last one
ended, until `--requests` are done. The request's bytes are made before the run. Per read of a response
it takes one perf_counter stamp (CLOCK_MONOTONIC on Linux, the mock's clock) and counts the SSE events
the read completed by their bytes (each ends in a blank line); the first `--output-tokens` events of a
response are its tokens, one an event, as the bundled mock sends them. Writes JSON: per request its
start, when it was written, its tokens' times, and whether it was of the first wave (due at the
start).

    python benchmarks/reference_client.py --url http://127.0.0.1:8000/v1 --streams 64 --requests 128 \\
        --out ref.json"""

from __future__ import annotations

import argparse
import asyncio
import json
from time import perf_counter
from urllib.parse import urlsplit

END = b"0\r\n\r\n"  # the end of a chunked body


class Slot(asyncio.Protocol):
    """One connection and the response it is reading."""

    def __init__(self):
        self.transport = None
        self.times: list[float] = []  # the events' stamps of the response being read
        self.tail = b""  # the last bytes read: an event's blank line or the body's end may span reads
        self.done: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        stamp = perf_counter()
        seen = self.tail + data
        events = seen.count(b"\n\n") - self.tail.count(b"\n\n")
        self.times += [stamp] * events
        self.tail = seen[-len(END) :]
        if self.tail == END:
            self.tail = b""
            self.done.set_result(None)

    def connection_lost(self, exc) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("the server closed the connection"))


async def run(args: argparse.Namespace) -> list[dict]:
    parts = urlsplit(args.url.rstrip("/") + "/completions")
    body = json.dumps({
        "model": args.model,
        "prompt": list(range(1, args.prompt_tokens + 1)),
        "max_tokens": args.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()  # fmt: skip
    request = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    left = iter(range(args.requests))
    rows: list[dict] = []

    async def slot() -> None:
        start = due  # the first request is due at the run's start, its connection made after
        _, conn = await loop.create_connection(Slot, parts.hostname, parts.port)
        for _ in left:
            conn.done = loop.create_future()
            conn.times = []
            conn.transport.write(request)
            written = perf_counter()
            await conn.done
            tokens = conn.times[: args.output_tokens]
            rows.append({"start": start, "written": written, "tokens": tokens, "first": start == due})
            start = perf_counter()  # the next request starts as this one ends
        conn.transport.close()

    due = perf_counter()
    await asyncio.gather(*(slot() for _ in range(args.streams)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--url", required=True, help="base URL, ending in /v1")
    parser.add_argument("--model", default="mock")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        rows = asyncio.run(run(args))
    else:
        rows = uvloop.run(run(args))
    with open(args.out, "w") as f:
        json.dump({"clock": "perf_counter", "requests": rows}, f)


if __name__ == "__main__":
    main()
