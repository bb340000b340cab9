"""The frontend of a split engine: LLMEngine's API, with the engine core in a child process
(engine/core/core_process.py), messages typed in engine/core/core_messages.py. Requests and aborts are batched
into one message per step() call; step() returns whatever outputs the core has produced since, waiting
briefly when there are none yet."""

from __future__ import annotations

import gc
import logging
import operator
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import NoReturn

import zmq
from llmbench.engine.config import EngineConfig
from llmbench.engine.core import core_messages as msg
from llmbench.engine.observe.profiler import ProfileAnswer
from llmbench.engine.observe.timing import StepRecord
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams, StepOutputs

logger = logging.getLogger(__name__)

POLL_MS = 1  # a step() with nothing to return waits this long for the core
SHUTDOWN_TIMEOUT_S = 10.0


class EngineCoreError(RuntimeError):
    """The engine core process failed or died; its traceback, when it sent one, is logged."""


class EngineCoreClient:
    def __init__(self, config: EngineConfig, step_hook: str | None = None):
        """step_hook: "module:function" the core process calls for its step hook
        (engine/core/core_process.py)."""
        self._dir = tempfile.mkdtemp(prefix="llmbench-core-")
        self._context = zmq.Context()
        self._push = self._context.socket(zmq.PUSH)
        self._pull = self._context.socket(zmq.PULL)
        inbox, outbox = f"ipc://{self._dir}/in", f"ipc://{self._dir}/out"
        self._push.bind(inbox)
        self._pull.bind(outbox)
        self._commands: list[msg.Command] = []
        # outputs not yet taken: the last step's as it came, the rest (errors found here, earlier
        # steps, their plain decodes built) in _outputs, in order before it
        self._outputs: list[RequestOutput] = []
        self._last: StepOutputs | None = None
        self._records: list[StepRecord] | None = None  # set by a drain's reply
        self._check_replies: list[str | None] = []  # a check's reply: failure text or None
        self._profiled: list[ProfileAnswer] = []  # a profile start's or stop's reply
        self._unfinished: Counter[str] = Counter()  # a duplicate id is live twice until both finish
        self._closed = False
        self.executor: msg.Ready | None = None  # shape, max_model_len, num_blocks, device
        # a fresh interpreter, not multiprocessing: nothing of the caller's main module is re-run
        level = str(logging.getLogger().getEffectiveLevel())
        command = [
            sys.executable,
            "-m",
            "llmbench.engine.core.core_process",
            inbox,
            outbox,
            str(os.getpid()),
            level,
        ]
        command += [step_hook] if step_hook else []
        self._process = subprocess.Popen(command)
        self._exited = os.pidfd_open(self._process.pid)  # readable once the core has exited
        self._poller = zmq.Poller()
        self._poller.register(self._pull, zmq.POLLIN)
        self._poller.register(self._exited, zmq.POLLIN)
        self._send_poller = zmq.Poller()
        self._send_poller.register(self._push, zmq.POLLOUT)
        self._send_poller.register(self._exited, zmq.POLLIN)
        try:
            self._send(msg.encoder.encode(config))
            while self.executor is None:
                self._receive(timeout_ms=None)
        except BaseException:
            self.shutdown()
            raise

    # requests in

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float | None = None,
    ) -> None:
        arrival_time = time.perf_counter() if arrival_time is None else arrival_time
        ids, problem = _wire_prompt(prompt_token_ids, params)
        if problem is not None:  # would not encode for the core: it fails alone, as in-process
            self._outputs.append(RequestOutput(request_id, [], True, FinishReason.ERROR, problem))
            return
        self._commands.append(msg.Add(request_id, ids, params, arrival_time))
        self._unfinished[request_id] += 1

    def abort(self, request_id: str) -> None:
        self._commands.append(msg.Abort(request_id))

    def reset_prefix_cache(self) -> None:
        # in order with the commands around it: a request sent after it finds no cached prefix
        self._commands.append(msg.ResetPrefixCache())

    def has_unfinished(self) -> bool:
        return bool(self._unfinished) or bool(self._outputs) or self._last is not None

    # outputs back

    def step(self) -> StepOutputs:
        """The outputs that arrived since the last call (possibly none)."""
        self._flush()
        self._receive(timeout_ms=0)
        if not self._outputs and self._last is None and self._unfinished:
            self._receive(timeout_ms=POLL_MS)
        outputs = self._last if self._last is not None else StepOutputs([], [], [])
        outputs.outputs[:0] = self._outputs
        self._outputs, self._last = [], None
        return outputs

    def drain_step_records(self) -> list[StepRecord]:
        """Step records since the last drain: a round trip, answered between two core steps."""
        self._commands.append(msg.Drain())
        self._flush()
        self._records = None
        while self._records is None:
            self._receive(timeout_ms=None)
        records, self._records = self._records, None
        return records

    def check_empty(self) -> str | None:
        """Runs engine.scheduling.check.assert_engine_empty in the core, after every command sent before: None
        when no request is left and every KV block is free, else what is wrong."""
        self._commands.append(msg.Check())
        self._flush()
        while not self._check_replies:
            self._receive(timeout_ms=None)
        return self._check_replies.pop()

    def start_profile(self, trace: str) -> ProfileAnswer:
        """Profile the core's steps from its next on (engine/observe/profiler.py): a round trip."""
        return self._profile(msg.StartProfile(trace))

    def stop_profile(self) -> ProfileAnswer:
        return self._profile(msg.StopProfile())

    def _profile(self, command: msg.StartProfile | msg.StopProfile) -> ProfileAnswer:
        self._commands.append(command)
        self._flush()
        while not self._profiled:
            self._receive(timeout_ms=None)
        return self._profiled.pop()

    def kill(self) -> None:
        """Kill the core process: the only call another thread may make while the owner uses the
        client (a ZeroMQ socket is not thread-safe), which then raises EngineCoreError."""
        self._process.kill()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._process.poll() is None:
            try:
                self._push.send(msg.encoder.encode([msg.Shutdown()]), zmq.NOBLOCK)
                self._process.wait(SHUTDOWN_TIMEOUT_S)
            except (zmq.ZMQError, subprocess.TimeoutExpired):
                logger.warning("engine core did not stop in %.0f s: killing it", SHUTDOWN_TIMEOUT_S)
                self._process.kill()
                self._process.wait()
        os.close(self._exited)
        self._push.close(linger=0)
        self._pull.close(linger=0)
        self._context.term()
        shutil.rmtree(self._dir, ignore_errors=True)

    # the pipe

    def _flush(self) -> None:
        if not self._commands:
            return
        try:
            payload = msg.encoder.encode(self._commands)
        except OverflowError:  # an integer past 64 bits somewhere: find its request, send the rest
            payload = msg.encoder.encode([c for c in self._commands if self._encodes(c)])
        self._commands = []
        self._send(payload)

    def _send(self, payload: bytes) -> None:
        """Send to the core, waiting while its pipe is full; EngineCoreError once it has exited. A PUSH
        socket whose peer is gone has no pipe left and blocks a plain send() for ever."""
        if self._closed:
            raise EngineCoreError("the engine core was shut down")
        while True:
            try:
                self._push.send(payload, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
            if self._exited in dict(self._send_poller.poll()):
                self._core_exited()

    def _encodes(self, command: msg.Command) -> bool:
        """Whether the command encodes; an Add that does not fails alone, as a bad request does."""
        try:
            msg.encoder.encode(command)
            return True
        except OverflowError as e:
            self._unfinished[command.request_id] -= 1
            if self._unfinished[command.request_id] <= 0:
                del self._unfinished[command.request_id]
            error = f"cannot be sent to the engine core: {e}"
            self._outputs.append(RequestOutput(command.request_id, [], True, FinishReason.ERROR, error))
            return False

    def _receive(self, timeout_ms: int | None) -> None:
        """Take every message waiting, after waiting up to timeout_ms (None: until one comes) for the
        first. Raises EngineCoreError when the core sent an error or exited."""
        if self._closed:
            raise EngineCoreError("the engine core was shut down")
        events = dict(self._poller.poll(timeout_ms))
        if not events:
            return
        while True:
            try:
                payload = self._pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._handle(_decode(payload))
        if self._exited in events and not self._pull.poll(0):
            self._core_exited()

    def _core_exited(self) -> NoReturn:
        code = self._process.wait()
        self.shutdown()
        raise EngineCoreError(f"the engine core process exited unexpectedly (exit code {code})")

    def _handle(self, reply: msg.Reply) -> None:
        if isinstance(reply, msg.Outputs):
            for output in reply.step.outputs:  # a plain decode never finishes its request
                if output.finished:
                    self._unfinished[output.request_id] -= 1
                    if self._unfinished[output.request_id] <= 0:
                        del self._unfinished[output.request_id]
            if self._last is not None:  # a step before, not yet taken: its outputs stay first
                self._outputs += self._last
            self._last = reply.step
        elif isinstance(reply, msg.Records):
            self._records = reply.records
        elif isinstance(reply, msg.Checked):
            self._check_replies.append(reply.failure)
        elif isinstance(reply, msg.Profiled):
            self._profiled.append(reply.answer)
        elif isinstance(reply, msg.Ready):
            self.executor = reply
        else:
            logger.error("engine core traceback:\n%s", reply.traceback)
            self.shutdown()
            if self.executor is None and reply.error_type == "ValueError":
                raise ValueError(reply.message)  # unusable model settings: the same error as in-process
            raise EngineCoreError(f"the engine core process failed: {reply.error_type}: {reply.message}")


def _wire_prompt(prompt_token_ids: object, params: object) -> tuple[list[int], str | None]:
    """The prompt as plain ints (numpy ints do not encode), or why the request cannot be sent; the
    core checks everything else."""
    if not isinstance(params, SamplingParams):
        return [], f"params must be SamplingParams, got {type(params).__name__}"
    if not isinstance(prompt_token_ids, (list, tuple)):
        return [], f"prompt_token_ids must be a list of integers, got {type(prompt_token_ids).__name__}"
    try:
        return [operator.index(t) for t in prompt_token_ids], None
    except TypeError:
        return [], "prompt token ids must be integers"


def _decode(payload: bytes) -> msg.Reply:
    """A step's outputs build hundreds of objects: with the collector paused they cost one young
    collection afterwards instead of several during, and no older ones escalated by them (decoding
    256 outputs: 3.6 -> 0.6 us each)."""
    if not gc.isenabled():
        return msg.reply_decoder.decode(payload)
    gc.disable()
    try:
        return msg.reply_decoder.decode(payload)
    finally:
        gc.enable()
