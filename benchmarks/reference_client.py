"""The bare reference client of benchmarks/client_fidelity.py: the least a Python streaming client can
do, so that what another client adds on top shows against it.

One asyncio loop (the standard one), one aiohttp session, `--streams` requests in flight until
`--requests` are done. Per read of a response it takes one perf_counter stamp (CLOCK_MONOTONIC on
Linux, the mock's clock) and keeps the bytes; nothing else happens while streams run. Afterwards each
SSE event with text is given the stamp of the read that completed it. Writes JSON: per request its
submit time and its chunks' times.

    python benchmarks/reference_client.py --url http://127.0.0.1:8000/v1 --model mock \\
        --streams 64 --requests 128 --out ref.json"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp


async def one_request(session, url: str, body: dict) -> tuple[float, list[tuple[float, bytes]]]:
    reads = []
    submit = time.perf_counter()
    async with session.post(url, json=body) as response:
        response.raise_for_status()
        async for data in response.content.iter_any():
            reads.append((time.perf_counter(), data))
    return submit, reads


async def run(args: argparse.Namespace) -> list[tuple[float, list[tuple[float, bytes]]]]:
    body = {
        "model": args.model,
        "prompt": list(range(1, args.prompt_tokens + 1)),
        "max_tokens": args.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = args.url.rstrip("/") + "/completions"
    todo = iter(range(args.requests))
    results = []
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:

        async def stream_slot() -> None:
            for _ in todo:
                results.append(await one_request(session, url, body))

        await asyncio.gather(*(stream_slot() for _ in range(args.streams)))
    return results


def chunk_times(reads: list[tuple[float, bytes]]) -> list[float]:
    """The time of each SSE event with text: the stamp of the read that completed it."""
    times, pending = [], b""
    for stamp, data in reads:
        events = (pending + data).split(b"\n\n")
        pending = events.pop()
        for event in events:
            payload = event.partition(b"data: ")[2]
            if payload and payload != b"[DONE]":
                choices = json.loads(payload).get("choices") or [{}]
                if choices[0].get("text") or (choices[0].get("delta") or {}).get("content"):
                    times.append(stamp)
    return times


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
    results = asyncio.run(run(args))
    rows = [{"submit": submit, "chunks": chunk_times(reads)} for submit, reads in results]
    with open(args.out, "w") as f:
        json.dump({"clock": "perf_counter", "requests": rows}, f)


if __name__ == "__main__":
    main()
