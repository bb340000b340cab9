import gc
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.core_client import EngineCoreClient, EngineCoreError
from llmbench.engine.core.gc_heap import YOUNG_GC_THRESHOLD
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import FinishReason, SamplingParams

from tests.engine.helpers import drain, process_gone, run_to_completion

TINY = dict(model=ModelConfig(preset="tiny", device="cpu", dtype="float32"), max_num_seqs=8)


@pytest.fixture(scope="module")
def client():
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True))
    yield core
    core.shutdown()


def test_split_outputs_equal_in_process_outputs(client):
    prompts = [[(7 * i + j) % 500 + 3 for j in range(5 + 9 * i)] for i in range(6)]
    params = SamplingParams(max_tokens=12)
    split_tokens, split_done = run_to_completion(client, prompts, params)
    local = LLMEngine(EngineConfig(**TINY))
    local_tokens, local_done = run_to_completion(local, prompts, params)
    assert split_tokens == local_tokens and len(split_tokens) == 6
    assert {k: o.finish_reason for k, o in split_done.items()} == {
        k: o.finish_reason for k, o in local_done.items()
    }
    assert split_done["0"].token_ids == split_tokens["0"]

    records = client.drain_step_records()
    assert len(records) > 0 and sum(r.num_prefill_tokens for r in records) == sum(map(len, prompts))
    assert all(r.ipc_ms > 0 for r in records)  # every step's outputs were encoded and sent
    assert client.drain_step_records() == []


def test_abort_and_bad_requests_finish_alone(client):
    client.add_request("long", list(range(3, 40)), SamplingParams(max_tokens=1000))
    client.add_request("empty", [], SamplingParams())
    client.add_request("short", [5, 6, 7], SamplingParams(max_tokens=3))
    finished = {}
    while "long" not in finished:
        for output in client.step():
            if output.finished:
                finished[output.request_id] = output
            elif output.request_id == "long":
                client.abort("long")
    assert finished["empty"].finish_reason is FinishReason.ERROR and finished["empty"].error == "empty prompt"
    assert finished["long"].finish_reason is FinishReason.ABORT
    assert 0 < len(finished["long"].token_ids) < 1000
    while client.has_unfinished():
        for output in client.step():
            finished[output.request_id] = output
    assert finished["short"].finish_reason is FinishReason.LENGTH and len(finished["short"].token_ids) == 3


def test_check_empty_runs_in_the_core_and_reports_a_running_request(client):
    run_to_completion(client, [[3, 4, 5, 6]], SamplingParams(max_tokens=5))
    assert client.check_empty() is None  # every request finished, every KV block back in the pool
    client.add_request("held", list(range(3, 40)), SamplingParams(max_tokens=1000, ignore_eos=True))
    while not any(o.request_id == "held" for o in client.step()):
        pass  # the core has scheduled it: it now holds KV blocks
    failure = client.check_empty()
    assert failure.startswith("running: [Sequence('held', ") and failure.endswith(", running)]")
    client.abort("held")
    while client.has_unfinished():
        client.step()
    assert client.check_empty() is None  # the abort gave its blocks back


def test_shutdown_leaves_no_process():
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True))
    pid = core._process.pid
    assert not process_gone(pid)
    core.shutdown()
    assert process_gone(pid)
    core.shutdown()  # twice is harmless


def test_a_sigterm_to_the_group_leaves_stopping_the_core_to_the_frontend():
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True))
    os.kill(core._process.pid, signal.SIGTERM)  # as a killpg of the server's group delivers it
    tokens, finished = run_to_completion(core, [[3, 4, 5]], SamplingParams(max_tokens=3))
    assert len(tokens["0"]) == 3 and finished["0"].finish_reason is FinishReason.LENGTH
    pid = core._process.pid
    core.shutdown()
    assert process_gone(pid) and core._process.returncode == 0  # stopped by its shutdown message


def test_core_exits_when_its_parent_dies(tmp_path):
    script = textwrap.dedent(
        """
        import os
        from llmbench.engine.config import EngineConfig, ModelConfig
        from llmbench.engine.core.core_client import EngineCoreClient
        config = EngineConfig(model=ModelConfig(preset="tiny", device="cpu"), process_split=True)
        core = EngineCoreClient(config)
        print(core._process.pid, flush=True)
        os._exit(0)  # no shutdown: the core is orphaned
        """
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(pid)


def test_a_crash_in_the_core_is_reported():
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True))
    core.add_request("r", [3, 4, 5], SamplingParams(max_tokens=4))
    os.kill(core._process.pid, signal.SIGKILL)
    with pytest.raises(EngineCoreError, match=r"exited unexpectedly \(exit code -9\)"):
        while True:
            core.step()
    core.shutdown()


def test_a_send_to_a_core_that_died_raises_instead_of_blocking():
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True))
    os.kill(core._process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not process_gone(core._process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # ZeroMQ drops the dead peer's pipe: a plain send() on the PUSH socket then blocks
    errors = []

    def drain():
        try:
            core.drain_step_records()
        except EngineCoreError as e:
            errors.append(str(e))

    sender = threading.Thread(target=drain, daemon=True)
    sender.start()
    sender.join(10)
    assert not sender.is_alive(), "the send to a dead core is still blocked"
    assert errors == ["the engine core process exited unexpectedly (exit code -9)"]
    core.shutdown()


def test_a_message_that_is_not_a_command_fails_the_core_without_running_it():
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True))
    # a pickle that would run code when unpickled: typed msgpack decoding rejects it instead
    core._push.send(pickle.dumps(os.system))
    with pytest.raises(EngineCoreError, match="failed: (DecodeError|ValidationError): "):
        while True:
            core.step()
    assert process_gone(core._process.pid)


def test_numpy_ids_are_sent_as_ints_and_a_bad_prompt_fails_alone(client):
    client.add_request("np", list(np.arange(3, 9)), SamplingParams(max_tokens=3))
    client.add_request("text", ["a", "b"], SamplingParams())
    client.add_request("params", [3, 4], {"max_tokens": 3})
    client.add_request("seed", [3, 4], SamplingParams(max_tokens=2, seed=2**70))  # wider than msgpack's ints
    client.add_request("next", [3, 4], SamplingParams(max_tokens=2))  # in the same message
    _, finished = drain(client)
    assert finished["seed"].error.startswith("cannot be sent to the engine core: can't serialize ints")
    assert finished["next"].finish_reason is FinishReason.LENGTH
    assert finished["np"].finish_reason is FinishReason.LENGTH and len(finished["np"].token_ids) == 3
    assert finished["text"].error == "prompt token ids must be integers"
    assert finished["params"].error == "params must be SamplingParams, got dict"


def test_unusable_model_settings_raise_value_error_as_in_process():
    config = EngineConfig(model=ModelConfig(preset="no-such-preset", device="cpu"), process_split=True)
    with pytest.raises(ValueError, match="unknown model preset 'no-such-preset'"):
        EngineCoreClient(config)


class _GcState:
    """A step hook writing the core process's collector settings at its first step."""

    def before_step(self) -> None:
        path = os.environ["LLMBENCH_TEST_GC_STATE"]
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump({"young": gc.get_threshold()[0], "frozen": gc.get_freeze_count()}, f)

    def close(self) -> None:
        pass


def gc_state_hook():
    return _GcState()


def test_the_core_freezes_its_loaded_heap_and_collects_rarely(tmp_path, monkeypatch):
    """Loading's objects are out of every collection's scan, and the per-step objects die by their
    reference counts before a young collection catches them (so none is promoted into full ones)."""
    state = tmp_path / "gc.json"
    monkeypatch.setenv("LLMBENCH_TEST_GC_STATE", str(state))
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True), step_hook=f"{__name__}:gc_state_hook")
    try:
        run_to_completion(core, [[1, 2, 3]], SamplingParams(max_tokens=2))
    finally:
        core.shutdown()
    settings = json.loads(state.read_text())
    assert settings["young"] == YOUNG_GC_THRESHOLD
    assert settings["frozen"] > 1000  # torch and the model


class _StepGate:
    """A step hook holding the core before each step until the test allows it: the gate file's size is
    the number of steps the core may run."""

    def __init__(self):
        self.path = os.environ["LLMBENCH_TEST_STEP_GATE"]
        self.steps = 0

    def before_step(self) -> None:
        while os.path.getsize(self.path) <= self.steps:
            time.sleep(0.001)
        self.steps += 1

    def close(self) -> None:
        pass


def step_gate_hook():
    return _StepGate()


def hold_outputs(core: EngineCoreClient, count: int) -> None:
    """Receive the core's outputs without taking them, until `count` are held for the next step()."""
    deadline = time.monotonic() + 60
    while len(core._outputs) + len(core._last or ()) < count:
        assert time.monotonic() < deadline, f"the core sent {len(core._outputs)} outputs, not {count}"
        core._receive(timeout_ms=100)


def test_steps_taken_together_keep_each_request_s_token_order(tmp_path, monkeypatch):
    """Plain decodes cross the split as two lists; several of the core's steps read in one call keep
    every request's tokens in order, the earlier steps' plain decodes built as RequestOutputs. The core
    runs only the steps the test lets it, so the same steps are taken together on any host."""
    gate = tmp_path / "gate"
    gate.write_bytes(b"")
    monkeypatch.setenv("LLMBENCH_TEST_STEP_GATE", str(gate))
    prompts = [[(5 * i + j) % 400 + 3 for j in range(4 + 3 * i)] for i in range(4)]
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    expected, _ = run_to_completion(LLMEngine(EngineConfig(**TINY)), prompts, params)
    core = EngineCoreClient(EngineConfig(**TINY, process_split=True), step_hook=f"{__name__}:step_gate_hook")
    try:
        for i, prompt in enumerate(prompts):
            core.add_request(str(i), prompt, params)
        assert len(core.step()) == 0  # the requests are sent; the core waits before its first step
        gate.write_bytes(b"s" * 5)  # the prefill (every first token), then four steps of plain decodes
        hold_outputs(core, 5 * len(prompts))
        taken = core.step()
        assert taken.decode_request_ids == ["0", "1", "2", "3"]  # the last step's, still two lists
        assert len(taken.outputs) == 4 * len(prompts)  # the four steps before, as RequestOutputs
        tokens = {}
        for output in taken:
            tokens.setdefault(output.request_id, []).extend(output.new_token_ids)
        assert tokens == {rid: t[:5] for rid, t in expected.items()}
        gate.write_bytes(b"s" * 1000)
        rest, finished = drain(core)
    finally:
        core.shutdown()
    for rid, later in rest.items():
        tokens[rid] += later
    assert tokens == expected and {rid: o.token_ids for rid, o in finished.items()} == expected
