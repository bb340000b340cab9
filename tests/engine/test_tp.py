"""Tensor parallelism on the CPU: 2 ranks over gloo, tiny model, float32. Greedy tokens equal one
rank's (and transformers') with every scheduling toggle on; every rank's process is gone after a
normal shutdown, a killed or hung worker, a worker that dies during startup, and a killed parent.
Each 2-rank engine costs seconds to start on 2 cores, so each test builds one."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from llmbench.engine.config import ConfigError, EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.models.shape import PRESETS
from llmbench.engine.parallel import launch
from llmbench.engine.parallel.group import STEP_TIMEOUT_S, TensorParallelError, TPGroup, packed_capacity
from llmbench.engine.parallel.sharding import shard_plan, take_shard
from llmbench.engine.request import SamplingParams

from tests.engine.helpers import TINY_CPU, process_gone, wait_gone
from tests.engine.hf_reference import GREEDY, engine_for, make_prompts, run

# the failure tests also run on 2 GPUs where there are (NCCL), the path the heartbeats exist for
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu(2))]
# chunked prefill (24-token budget), prefix caching, 4-step windows and a pool small enough to preempt
EVERY_TOGGLE = dict(
    block_size=4,
    max_num_batched_tokens=24,
    chunked_prefill=True,
    prefix_caching=True,
    num_scheduler_steps=4,
    num_gpu_blocks=40,
    max_num_seqs=8,
)


def workers_of(engine: LLMEngine) -> list[subprocess.Popen]:
    return engine.executor.group._workers.processes


@pytest.mark.parametrize("overlap", ["async_output", "async_scheduling"])
def test_two_ranks_give_one_ranks_greedy_tokens_with_every_toggle(overlap):
    prompts = make_prompts()
    one = LLMEngine(EngineConfig(model=TINY_CPU, **EVERY_TOGGLE, **{overlap: True}))
    expected, expected_cached, _ = run(one, prompts, GREEDY)
    one.shutdown()
    two = LLMEngine(EngineConfig(model=TINY_CPU, **EVERY_TOGGLE, **{overlap: True}, tensor_parallel_size=2))
    workers = workers_of(two)
    tokens, cached, preempted = run(two, prompts, GREEDY)  # rank 0's leak check included
    assert tokens == expected
    assert cached == expected_cached and sum(cached) > 0  # prefix hits
    assert preempted > 0
    two.shutdown()
    assert [w.wait(10) for w in workers] == [0]


def test_two_ranks_load_an_hf_checkpoint_token_exact_with_transformers(checkpoint):
    path, expected = checkpoint
    engine = engine_for(path, tensor_parallel_size=2, **EVERY_TOGGLE)
    tokens, _, preempted = run(engine, make_prompts(), GREEDY)
    engine.shutdown()
    assert tokens == expected
    assert preempted > 0


def test_shards_of_every_parameter_reassemble_the_full_tensor():
    shape = PRESETS["tiny"]
    generator = torch.Generator().manual_seed(0)
    for name, full_shape in [
        ("layers.0.self_attn.qkv_proj.weight", (shape.q_size + 2 * shape.kv_size, 64)),
        ("layers.0.mlp.down_proj.weight", (64, shape.intermediate_size)),
        ("embed_tokens.weight", (shape.vocab_size, 64)),
    ]:
        full = torch.randn(full_shape, generator=generator)
        plan = shard_plan(name, shape)
        dim, parts = plan
        shards = [take_shard(full, plan, rank, 2) for rank in range(2)]
        # each part is the concatenation of its slice on every rank
        rebuilt = [
            torch.cat(pieces, dim)
            for pieces in zip(*(s.split([p // 2 for p in parts], dim) for s in shards), strict=True)
        ]
        assert torch.equal(torch.cat(rebuilt, dim), full), name


def test_a_vocabulary_that_does_not_divide_is_padded_on_the_last_rank():
    full = torch.arange(10.0)[:, None].repeat(1, 3)
    shards = [take_shard(full, (0, [10]), rank, 4) for rank in range(4)]
    assert [s.shape[0] for s in shards] == [3, 3, 3, 3]
    assert torch.equal(torch.cat(shards)[:10], full) and not shards[3][1:].any()


def test_tensor_parallel_size_and_the_gpus_it_needs_are_checked(monkeypatch):
    with pytest.raises(ConfigError, match="tensor_parallel_size: expected an integer >= 1 and <= 64, got 0"):
        EngineConfig(model=TINY_CPU, tensor_parallel_size=0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    EngineConfig(model=TINY_CPU, tensor_parallel_size=2).check_ranks()  # CPU ranks need no GPU
    with pytest.raises(ConfigError, match="tensor_parallel_size: 2 ranks need as many GPUs, 1 visible"):
        EngineConfig(model=ModelConfig(preset="tiny", device="cuda"), tensor_parallel_size=2).check_ranks()


def test_kv_heads_that_do_not_divide_are_an_error_before_any_process_starts(monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", None)  # starting a worker would raise a TypeError
    with pytest.raises(
        ValueError, match="engine.tensor_parallel_size 3 does not divide the model's 2 KV heads"
    ):
        LLMEngine(EngineConfig(model=TINY_CPU, tensor_parallel_size=3))


def start_and_step(device: str = "cpu", **engine_kwargs) -> LLMEngine:
    model = ModelConfig(preset="tiny", device=device, dtype="float32")
    engine = LLMEngine(EngineConfig(model=model, max_num_seqs=4, tensor_parallel_size=2, **engine_kwargs))
    for i in range(3):
        engine.add_request(str(i), [1, 2 + i, 3, 4], SamplingParams(max_tokens=200, ignore_eos=True))
    engine.step()
    return engine


@pytest.mark.leaves_work
def test_rank_0_sends_each_step_in_one_broadcast(monkeypatch):
    engine = start_and_step(num_scheduler_steps=4)
    sizes = []
    broadcast = torch.distributed.broadcast
    monkeypatch.setattr(
        torch.distributed, "broadcast", lambda t, *a, **k: sizes.append(t.numel()) or broadcast(t, *a, **k)
    )
    for _ in range(8):
        engine.step()
    engine.shutdown()
    # a 4-step window: the step's buffer (header inside), then the 3 sequences' tokens of each forward
    # the later forwards read; the last is the shutdown
    capacity = packed_capacity(engine.config, engine.executor.max_model_len)
    assert sizes == [capacity, 3, 3, 3] * 2 + [capacity]


def step_until_error(engine: LLMEngine) -> str:
    with pytest.raises(TensorParallelError) as error:
        for _ in range(1000):
            engine.step()
    return str(error.value)


@pytest.mark.leaves_work
@pytest.mark.parametrize("device", DEVICES)
def test_a_killed_worker_is_an_engine_error_naming_it_and_leaves_no_process(device):
    engine = start_and_step(device)
    worker = workers_of(engine)[0]
    os.kill(worker.pid, signal.SIGKILL)
    assert step_until_error(engine) == "tensor-parallel rank 1 exited with code -9"
    # the engine stays failed with the same reason
    assert step_until_error(engine) == "tensor-parallel rank 1 exited with code -9"
    engine.shutdown()
    assert wait_gone([worker.pid])


@pytest.mark.leaves_work
@pytest.mark.parametrize("device", DEVICES)
def test_a_hung_worker_is_an_engine_error_and_is_killed_at_shutdown(device):
    engine = start_and_step(device)
    worker = workers_of(engine)[0]
    os.kill(worker.pid, signal.SIGSTOP)
    assert "tensor-parallel collective failed (a rank hung or died)" in step_until_error(engine)
    engine.shutdown()
    assert worker.poll() == -signal.SIGKILL


@pytest.mark.leaves_work
@pytest.mark.parametrize("device", DEVICES)
def test_a_worker_hung_while_the_engine_idles_fails_the_next_step_at_once(device):
    engine = start_and_step(device)
    worker = workers_of(engine)[0]
    os.kill(worker.pid, signal.SIGSTOP)
    # no step runs: only the heartbeats can find out
    group, deadline = engine.executor.group, time.monotonic() + 3 * STEP_TIMEOUT_S
    while group.dead is None:
        assert time.monotonic() < deadline, "the hung worker went unnoticed"
        time.sleep(0.1)
    start = time.monotonic()
    assert "tensor-parallel collective failed (a rank hung or died)" in step_until_error(engine)
    assert time.monotonic() - start < STEP_TIMEOUT_S / 2  # not the step's own timeout
    engine.shutdown()
    assert worker.poll() == -signal.SIGKILL


def worker_children() -> list[int]:
    """This process's children that are tensor-parallel workers, or exited and not yet reaped, found by
    the parent pid in each process's stat: a child stays there until it is reaped, whichever thread
    started it (a thread's own list of children goes with the thread, between the listing and the read),
    and a process gone since the listing is skipped."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
            if int(parent) != os.getpid():
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if state == "Z" or b"llmbench.engine.parallel.worker" in f.read():
                    found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):  # gone since the listing, or reaped meanwhile
            continue
    return found


def test_worker_children_skips_a_process_gone_since_the_listing(monkeypatch):
    listdir = os.listdir
    # a pid above the kernel's largest pid_max (2**22): listed, then gone as a thread or process can be
    monkeypatch.setattr(os, "listdir", lambda path: [*listdir(path), str(2**22 + 1)])
    worker = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "llmbench.engine.parallel.worker"],
        stdin=subprocess.PIPE,
    )
    try:
        assert worker_children() == [worker.pid]
    finally:
        worker.stdin.close()
        worker.wait(30)
    assert worker_children() == []


def kill_worker_after_joining(*args) -> TPGroup:
    """Rank 0's group, once formed, then its worker SIGKILLed (as the OOM killer would) while it loads."""
    group = TPGroup(*args)
    os.kill(args[-1].processes[0].pid, signal.SIGKILL)
    return group


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cause", ["interpreter", "load"])
def test_a_worker_that_dies_during_startup_is_an_error_within_seconds(monkeypatch, cause, device):
    if cause == "interpreter":
        # an environment only a fresh interpreter reads: the worker's Python cannot start (exit 1)
        monkeypatch.setenv("PYTHONHOME", "/nonexistent")
        expected = "tensor-parallel rank 1 exited with code 1 during startup"
    else:
        monkeypatch.setattr(launch, "TPGroup", kill_worker_after_joining)
        expected = "tensor-parallel rank 1 exited with code -9 during startup"
    assert worker_children() == []
    start = time.monotonic()
    with pytest.raises(TensorParallelError) as error:
        LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", device=device), tensor_parallel_size=2))
    assert time.monotonic() - start < 10
    assert str(error.value) == expected
    assert worker_children() == []


def test_workers_exit_when_their_parent_is_killed(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from llmbench.engine.config import EngineConfig, ModelConfig
        from llmbench.engine.core.llm_engine import LLMEngine
        from llmbench.engine.request import SamplingParams
        engine = LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", device="cpu", dtype="float32"),
                                        tensor_parallel_size=2))
        engine.generate([[1, 2, 3]], SamplingParams(max_tokens=4))
        print(*[w.pid for w in engine.executor.group._workers.processes], flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 1 and not process_gone(pids[0])
    finally:
        parent.kill()
        parent.wait()
    assert wait_gone(pids)
