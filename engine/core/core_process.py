"""The engine core in a process of its own (engine.process_split): it owns the LLMEngine and steps it
in a busy loop while work exists, so scheduling and output processing never wait for the frontend's
GIL. Frontend and core talk over two ZeroMQ PUSH/PULL pipes on ipc:// sockets, one msgpack message of
the typed structs in engine/core/core_messages.py per message; a step's outputs travel in one message.

A step hook, named "module:function" on the command line, lets a tool act at the core's step boundaries:
the function returns None or an object the engine calls before_step() on as each of its steps begins,
and close() on at shutdown (llmbench's profiler window uses it)."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import time
import traceback
from typing import Any

import zmq
from llmbench.engine.config import EngineConfig
from llmbench.engine.core import core_messages as msg
from llmbench.engine.core.gc_heap import freeze_heap
from llmbench.engine.scheduling.check import assert_engine_empty

IDLE_POLL_MS = 100  # an idle core wakes this often to check that its parent is alive
PARENT_CHECK_S = 1.0  # a busy core checks its parent at most this often


def run_core(inbox: str, outbox: str, parent_pid: int, log_level: int, step_hook: str | None = None) -> None:
    """The core process's work; returns on a shutdown command or when the parent is gone."""
    # Ctrl-C and a SIGTERM to the process group (how `backend.type: server` stops llmbench serve) reach
    # the core too: the frontend handles them and shuts the core down, rather than seeing it die mid-step
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format="engine core: %(message)s")
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.connect(inbox)
    push = context.socket(zmq.PUSH)
    push.connect(outbox)
    try:
        while not pull.poll(IDLE_POLL_MS):
            if os.getppid() != parent_pid:
                return  # the frontend died before sending the config
        config = msg.config_decoder.decode(pull.recv())
        _CoreLoop(config, pull, push, parent_pid, make_step_hook(step_hook)).run()
    except Exception as e:
        push.send(msg.encoder.encode(msg.Failed(type(e).__name__, str(e), traceback.format_exc())))
    finally:
        pull.close(linger=0)
        push.close(linger=1000)  # let a last error or reply reach the frontend
        context.term()


def make_step_hook(spec: str | None) -> Any:
    """The step hook that "module:function" makes (None without one), in the process that steps."""
    if not spec:
        return None
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)()


class _CoreLoop:
    def __init__(
        self, config: EngineConfig, pull: zmq.Socket, push: zmq.Socket, parent_pid: int, step_hook: Any
    ):
        from llmbench.engine.core.llm_engine import LLMEngine

        self.pull, self.push, self.parent_pid = pull, push, parent_pid
        self.engine = LLMEngine(config, step_hook)  # the engine calls it: hand-overs are no steps
        executor = self.engine.executor
        ready = msg.Ready(executor.shape, executor.max_model_len, executor.num_blocks, str(executor.device))
        freeze_heap()  # before Ready: the first requests must not wait for its collection
        push.send(msg.encoder.encode(ready))
        self.running = True

    def run(self) -> None:
        engine = self.engine
        last_parent_check = time.perf_counter()
        try:
            while self.running:
                busy = engine.has_unfinished()
                received_ms = self._receive(wait=not busy)
                now = time.perf_counter()
                if not busy or now - last_parent_check > PARENT_CHECK_S:
                    last_parent_check = now
                    if os.getppid() != self.parent_pid:
                        logging.getLogger(__name__).warning("frontend process gone: engine core exits")
                        return
                if not engine.has_unfinished():
                    continue
                outputs = engine.step()
                sent = time.perf_counter()
                if outputs:
                    self.push.send(msg.encoder.encode(msg.Outputs(outputs)), copy=False)
                if engine.step_log.last is not None:  # host time receiving and sending around it
                    # added: a streamed window's hand-overs between two steps count on the step before
                    engine.step_log.last.ipc_ms += received_ms + (time.perf_counter() - sent) * 1e3
        finally:
            engine.shutdown()

    def _receive(self, wait: bool) -> float:
        """Apply every waiting command; milliseconds spent receiving and decoding them. An idle core
        blocks here up to IDLE_POLL_MS instead of spinning."""
        if wait and not self.pull.poll(IDLE_POLL_MS):
            return 0.0
        spent = 0.0
        while True:
            start = time.perf_counter()
            try:
                commands = msg.command_decoder.decode(self.pull.recv(zmq.NOBLOCK))
            except zmq.Again:
                return spent
            spent += (time.perf_counter() - start) * 1e3
            for command in commands:
                self._apply(command)

    def _apply(self, command: msg.Command) -> None:
        if isinstance(command, msg.Add):
            self.engine.add_request(
                command.request_id, command.prompt_token_ids, command.params, command.arrival_time
            )
        elif isinstance(command, msg.Abort):
            self.engine.abort(command.request_id)
        elif isinstance(command, msg.Drain):
            self.push.send(msg.encoder.encode(msg.Records(self.engine.drain_step_records())))
        elif isinstance(command, msg.Check):
            self.push.send(msg.encoder.encode(msg.Checked(self._empty_check_failure())))
        elif isinstance(command, msg.ResetPrefixCache):
            self.engine.reset_prefix_cache()
        elif isinstance(command, msg.StartProfile):
            self.push.send(msg.encoder.encode(msg.Profiled(self.engine.start_profile(command.trace))))
        elif isinstance(command, msg.StopProfile):
            self.push.send(msg.encoder.encode(msg.Profiled(self.engine.stop_profile())))
        else:
            self.running = False  # Shutdown: the only command left

    def _empty_check_failure(self) -> str | None:
        """What assert_engine_empty finds wrong here, where the scheduler and the KV pool live."""
        try:
            assert_engine_empty(self.engine)
        except AssertionError as e:
            # a bare assert has no message: its traceback names the failed condition
            return str(e) or traceback.format_exc()
        return None


if __name__ == "__main__":
    # started as `python -m llmbench.engine.core.core_process INBOX OUTBOX PARENT_PID LOG_LEVEL
    # [MODULE:FUNCTION]`
    run_core(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
