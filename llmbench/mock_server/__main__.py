"""`python -m llmbench.mock_server [FLAGS]`: serve on 127.0.0.1 (a free port unless --port) until SIGTERM
or SIGINT; the first line on stdout names the port."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from llmbench.mock_server.http import Connection, MockApp
from llmbench.mock_server.settings import MockSettings


async def serve(settings: MockSettings, port: int) -> None:
    loop = asyncio.get_running_loop()
    app = MockApp(settings, loop)
    server = await loop.create_server(lambda: Connection(app), "127.0.0.1", port, backlog=4096)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llmbench.mock_server", description=__doc__)
    MockSettings.add_arguments(parser)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        settings = MockSettings.from_args(args)
    except ValueError as e:
        parser.exit(2, f"error: {e}\n")
    try:
        import uvloop  # the lighter loop, as vLLM's server runs on; the mock must stay cheaper than clients

        uvloop.run(serve(settings, args.port))
    except ImportError:
        asyncio.run(serve(settings, args.port))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
