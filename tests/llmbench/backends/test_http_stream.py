"""The stream loop's HTTP/1.1 client (http_stream.py) against the bundled mock and bare sockets: chunked
and content-length bodies, keep-alive reuse, error statuses with their bodies, a server that closes or
stalls, a cancel."""

import asyncio
import json

import pytest

from llmbench.backends.http_stream import HttpStreams, Post
from llmbench.mock_server import MockServer, MockSettings

BODY = {"model": "mock", "prompt": [1, 2, 3], "max_tokens": 3, "stream": True}


def post_all(url: str, bodies: list[dict], stall_s: float | None = None) -> tuple[list, list[list], int]:
    """Post each body in turn on one HttpStreams: (outcomes, each request's sink items, connections
    opened)."""

    async def run():
        streams = HttpStreams(url, {"X-Test": "1"}, 5.0, stall_s)
        await streams.resolve()
        outcomes, items, opened = [], [], set()
        for i, body in enumerate(bodies):
            got = []
            post = Post(str(i), got.append, 0.0)
            outcomes.append(await streams.post(json.dumps(body).encode(), post))
            opened.add(id(post.connection))
            items.append(got)
        streams.close()
        return outcomes, items, len(opened)

    return asyncio.run(run())


def events(items: list) -> list[bytes]:
    data = b"".join(item[2] for item in items if isinstance(item[2], bytes))
    return [event for event in data.split(b"\n\n") if event]


def test_chunked_streams_on_one_kept_alive_connection():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=3)) as mock:
        outcomes, items, opened = post_all(mock.url + "/completions", [BODY] * 3)
        records = mock.records()
    assert outcomes == [None, None, None]
    assert opened == 1  # the second and third requests reused the first's connection
    assert [r.status for r in records] == [200, 200, 200]
    for got in items:
        headers = [item for item in got if isinstance(item[2], list)]
        assert len(headers) == 1 and got[0] is headers[0]  # the phases come first, once
        send_start, connected, sent = headers[0][2]
        assert send_start <= connected <= sent <= headers[0][1]
        texts = [json.loads(e.removeprefix(b"data: "))["choices"][0]["text"] for e in events(got)[:3]]
        assert texts == [" a", " a", " a"] and events(got)[-1] == b"data: [DONE]"


def test_a_content_length_body_and_error_statuses_with_their_message():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, output_tokens=2)) as mock:
        whole = BODY | {"stream": False}
        outcomes, items, opened = post_all(
            mock.url + "/completions", [BODY | {"model": "other"}, whole, BODY | {"prompt": 5}]
        )
    assert outcomes[0] == "HTTP 404: The model `other` does not exist."
    assert outcomes[1] is None
    assert json.loads(b"".join(item[2] for item in items[1] if isinstance(item[2], bytes)))["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
    }
    assert outcomes[2] == "HTTP 400: prompt: expected a string or a list of token ids"
    assert opened == 1  # an error answered with a body keeps the connection
    assert not [item for item in items[0] if isinstance(item[2], bytes)]  # an error body is no stream


def serve_raw(answer: bytes | None, close: bool):
    """A server that reads a request and writes `answer` (None: nothing), then closes or holds on."""

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if answer is not None:
            writer.write(answer)
            await writer.drain()
        if close:
            writer.close()
        else:
            await asyncio.sleep(30)

    return handle


def post_to_raw(answer: bytes | None, close: bool, stall_s: float | None = None) -> tuple[str | None, list]:
    async def run():
        server = await asyncio.start_server(serve_raw(answer, close), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        streams = HttpStreams(f"http://127.0.0.1:{port}/v1/completions", {}, 5.0, stall_s)
        await streams.resolve()
        got = []
        outcome = await streams.post(b"{}", Post("0", got.append, 0.0))
        streams.close()
        server.close()
        return outcome, got

    return asyncio.run(run())


def test_a_body_without_length_ends_with_its_connection():
    outcome, got = post_to_raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n", True)
    assert outcome is None and events(got) == [b"data: 1"]


def test_a_connection_closed_mid_body_or_unanswered_fails_with_why():
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n"
    outcome, got = post_to_raw(chunked, True)
    assert outcome == "connection error: the server closed the connection before the response ended"
    assert events(got) == [b"data: 1"]  # what came before is still handed over
    outcome, _ = post_to_raw(None, True)
    assert outcome == "connection error: the server closed the connection without answering"


def test_a_stalled_stream_fails_after_the_stall_bound():
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    outcome, _ = post_to_raw(head, False, stall_s=0.2)
    assert outcome == "stream stalled: no data within request_timeout_s=0.2"


def test_a_refused_connection_names_the_error():
    async def run():
        server = await asyncio.start_server(serve_raw(None, True), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        streams = HttpStreams(f"http://127.0.0.1:{port}/v1/completions", {}, 5.0, None)
        return await streams.post(b"{}", Post("0", [].append, 0.0))

    assert asyncio.run(run()).startswith("connection error: ConnectionRefusedError")


def test_a_cancelled_post_closes_its_connection_and_reads_no_more():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=20, output_tokens=50)) as mock:

        async def run():
            streams = HttpStreams(mock.url + "/completions", {}, 5.0, None)
            got = []
            post = Post("0", got.append, 0.0)
            task = asyncio.create_task(streams.post(json.dumps(BODY | {"max_tokens": 50}).encode(), post))
            while not events(got):
                await asyncio.sleep(0.01)
            post.cancel()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            seen = len(got)
            await asyncio.sleep(0.1)  # the mock goes on writing for a while, to a closed socket
            return post.connection, seen, len(got)

        connection, seen, later = asyncio.run(run())
    assert connection.transport.is_closing() and later == seen


def test_connections_prepared_ahead_carry_the_requests():
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    accepted = []

    async def handle(reader, writer):
        accepted.append(len(accepted))
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)  # the body, b"{}"
                writer.write(answer)
        except asyncio.IncompleteReadError:
            writer.close()

    async def run():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        streams = HttpStreams(f"http://127.0.0.1:{port}/v1/completions", {}, 5.0, None)
        await streams.resolve()
        streams.prepare(3)
        while len(accepted) < 3:
            await asyncio.sleep(0.01)
        posts = [Post(str(i), [].append, 0.0) for i in range(3)]
        outcomes = await asyncio.gather(*(streams.post(b"{}", post) for post in posts))
        streams.close()
        server.close()
        return outcomes, {id(post.connection) for post in posts}

    outcomes, connections = asyncio.run(run())
    assert outcomes == [None, None, None] and len(connections) == 3
    assert len(accepted) == 3  # no request opened a connection of its own
