"""The server's engine client: one thread of the server process drives the engine and hands each step's
outputs to the asyncio event loop in one call. In-process (engine.process_split off) that thread steps
the LLMEngine itself, so scheduling, execution and output processing compete with HTTP and
detokenization for the GIL (vLLM 0.5.3's shape); split, it only moves messages to and from the engine
core process (engine/core/core_client.py) and waits with the GIL released.

The event loop never touches the engine: requests and aborts cross to the thread in a queue and are
applied between steps. When the engine fails (an exception, or the core process dying) every stream
still open gets an EngineDeadError and `dead` says why."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from llmbench.engine.config import EngineConfig
from llmbench.engine.core.core_client import EngineCoreClient
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.observe.profiler import ProfileAnswer
from llmbench.engine.observe.timing import StepRecord
from llmbench.engine.request import RequestOutput, SamplingParams
from llmbench.engine.scheduling.check import assert_engine_empty

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # an idle thread wakes this often: a split core that died is noticed within it
RECORDS_EVERY_S = 0.5  # step records are drained this often, for /metrics (and so they never pile up)
JOIN_TIMEOUT_S = 10.0


class EngineDeadError(RuntimeError):
    """The engine stopped: no request can be served any more."""


class EngineLoop:
    def __init__(self, config: EngineConfig, on_records: Callable[[list[StepRecord]], None]):
        """on_records runs on the event loop with each batch of drained step records."""
        self.split = config.process_split
        self.engine = EngineCoreClient(config) if self.split else LLMEngine(config)
        self.executor = self.engine.executor  # shape, max_model_len, num_blocks
        self.dead: str | None = None
        self._on_records = on_records
        # step records for drain_step_records() callers, kept from the first call on (a benchmark
        # runner drains after its warm-up and after every trial; a server nobody drains keeps none)
        self._claimable: list[StepRecord] | None = None
        # engine request id -> its HTTP request's queue of (choice index, output, time handed over), and index
        self._routes: dict[str, tuple[asyncio.Queue, int]] = {}
        self._commands: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._asked: set[asyncio.Future] = set()  # check and drain answers not yet given
        self._wake = threading.Event()
        self._running = True
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once started
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> None:
        """Start stepping; called on the event loop that will receive the outputs."""
        self.loop = asyncio.get_running_loop()
        self._thread.start()

    # the event loop's side

    def add(
        self, request_id: str, prompt: list[int], params: SamplingParams, stream: asyncio.Queue, index: int
    ) -> None:
        if self.dead is not None:
            raise EngineDeadError(self.dead)
        self._routes[request_id] = (stream, index)
        self._send(("add", request_id, prompt, params, time.perf_counter()))

    def abort(self, request_id: str) -> None:
        """Drop the request: its outputs stop, the engine frees its KV blocks between two steps."""
        if self._routes.pop(request_id, None) is not None and self.dead is None:
            self._send(("abort", request_id))

    def stop_streams(self, reason: str) -> None:
        """End every request in flight with EngineDeadError(reason) and refuse new ones: the server is
        going down, and a stream left running would hold its exit for as long as it ran."""
        if self.dead is not None:
            return
        for request_id in self._routes:
            self._send(("abort", request_id))
        self._fail_all(reason)

    def reset_prefix_cache(self) -> None:
        """Forget the engine's cached prefixes before any request added after this call is scheduled."""
        if self.dead is not None:
            raise EngineDeadError(self.dead)
        self._send(("reset_prefix_cache",))

    @property
    def num_in_flight(self) -> int:
        """Engine requests handed over and not finished or aborted, as the event loop knows them."""
        return len(self._routes)

    async def check_empty(self) -> str | None:
        """None when the engine holds no request and every KV block is free, else what is wrong."""
        return await self._ask("check")

    async def drain_step_records(self) -> list[StepRecord]:
        """Every step record since the last call (from the engine now, not the last periodic drain)."""
        return await self._ask("drain")

    async def start_profile(self, trace: str) -> ProfileAnswer:
        """Profile the engine's steps from the next on (engine/observe/profiler.py); a torch trace goes to
        `trace`."""
        return await self._ask("start_profile", trace)

    async def stop_profile(self) -> ProfileAnswer:
        return await self._ask("stop_profile")

    async def _ask(self, kind: str, *args: Any) -> Any:
        """The engine thread's answer; EngineDeadError when the engine is gone before it answers."""
        if self.dead is not None:
            raise EngineDeadError(self.dead)
        future = self.loop.create_future()
        self._asked.add(future)
        self._send((kind, future, *args))
        try:
            return await future
        finally:
            self._asked.discard(future)

    def shutdown(self) -> None:
        """Stop stepping; the engine thread shuts the engine down as it leaves. Only that thread touches
        the engine once started: a ZeroMQ socket closed here while the thread sent on it aborted the
        process inside libzmq."""
        self._running = False
        self._wake.set()
        if self._thread.ident is None:  # never started: nothing else holds the engine
            self.engine.shutdown()
            return
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive() and self.split:
            # a core stuck in a step: killing it wakes the thread, which then closes its sockets
            logger.warning("engine core did not stop in %.0f s: killing it", JOIN_TIMEOUT_S)
            self.engine.kill()
            self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            logger.warning("engine thread still busy after %.0f s: it ends with the process", JOIN_TIMEOUT_S)

    def _send(self, command: tuple) -> None:
        self._commands.put(command)
        self._wake.set()

    def _dispatch(self, outputs: Iterable[RequestOutput], handed: float) -> None:
        for output in outputs:
            route = self._routes.get(output.request_id)
            if route is None:
                continue  # aborted: its last outputs have nowhere to go
            if output.finished:
                del self._routes[output.request_id]
            stream, index = route
            stream.put_nowait((index, output, handed))

    def _records_drained(self, records: list[StepRecord], future: asyncio.Future | None = None) -> None:
        if records:
            self._on_records(records)
        if future is not None:
            records, self._claimable = (self._claimable or []) + records, []
            _answer(future, records)
        elif self._claimable is not None:
            self._claimable += records

    def _fail_all(self, reason: str) -> None:
        self.dead = reason
        error = EngineDeadError(reason)
        for stream, _ in self._routes.values():
            stream.put_nowait(error)
        self._routes.clear()
        for future in self._asked:
            if not future.done():
                future.set_exception(error)

    # the engine thread's side

    def _run(self) -> None:
        loop, engine = self.loop, self.engine
        last_drain = time.perf_counter()
        try:
            while self._running:
                self._apply_commands()
                if engine.has_unfinished() or self.split:
                    # split: the client's step waits on the core with the GIL released, and an idle
                    # step notices at once a core that exited
                    outputs = engine.step()
                    if outputs:
                        loop.call_soon_threadsafe(self._dispatch, outputs, time.perf_counter())
                if not engine.has_unfinished():
                    self._wake.wait(IDLE_WAIT_S)
                    self._wake.clear()
                if time.perf_counter() - last_drain > RECORDS_EVERY_S:
                    last_drain = time.perf_counter()
                    records = engine.drain_step_records()
                    if records:
                        loop.call_soon_threadsafe(self._records_drained, records)
        except Exception as e:  # the engine is gone; the server stays up to say so
            logger.exception("engine failed")
            loop.call_soon_threadsafe(self._fail_all, f"engine failed: {e}")
        finally:
            engine.shutdown()

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            kind = command[0]
            if kind == "add":
                self.engine.add_request(*command[1:])
            elif kind == "abort":
                self.engine.abort(command[1])
            elif kind == "reset_prefix_cache":
                self.engine.reset_prefix_cache()
            elif kind == "drain":
                records = self.engine.drain_step_records()
                self.loop.call_soon_threadsafe(self._records_drained, records, command[1])
            elif kind == "start_profile":
                self.loop.call_soon_threadsafe(_answer, command[1], self.engine.start_profile(command[2]))
            elif kind == "stop_profile":
                self.loop.call_soon_threadsafe(_answer, command[1], self.engine.stop_profile())
            else:
                self._check(command[1])

    def _check(self, future: asyncio.Future) -> None:
        if self.split:
            failure = self.engine.check_empty()
        else:
            try:
                assert_engine_empty(self.engine)
                failure = None
            except AssertionError as e:
                failure = str(e) or "assert_engine_empty failed"
        self.loop.call_soon_threadsafe(_answer, future, failure)


def _answer(future: asyncio.Future, result: Any) -> None:
    if not future.done():  # else failed already: the engine died before the answer came
        future.set_result(result)
