"""Rank 0's side of a tensor-parallel engine: start one worker process per other rank (a fresh
interpreter each, `python -m llmbench.engine.parallel.worker`), join them in torch.distributed (NCCL on
CUDA, gloo on the CPU) and have the caller build this rank's model runner on the group. The worker
processes are watched from the first moment: one that exits during startup is an error within POLL_S,
not at the end of the startup timeout, one that exits later is named in the engine's error, and every
one is gone after shutdown."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist
from llmbench.engine.config import EngineConfig
from llmbench.engine.core import core_messages as msg
from llmbench.engine.loading.model_facts import ModelFacts
from llmbench.engine.models.shape import LlamaShape
from llmbench.engine.parallel.group import STARTUP_TIMEOUT, TensorParallelError, TPGroup, packed_capacity
from llmbench.engine.parallel.liveness import STOP_WAIT_S, WorkerProcesses

logger = logging.getLogger(__name__)

POLL_S = 0.05  # how often rank 0 looks at the worker processes while it waits for them at startup
ARRIVED = "arrived"  # the store counter each worker adds one to once its interpreter is up

Runner = TypeVar("Runner")


def check_shardable(size: int, shape: LlamaShape) -> None:
    """Head and MLP counts that split evenly over the ranks, checked before any process starts."""
    for count, what in ((shape.num_kv_heads, "KV heads"), (shape.intermediate_size, "MLP channels")):
        if count % size:
            raise ValueError(f"engine.tensor_parallel_size {size} does not divide the model's {count} {what}")


def start_runner(
    config: EngineConfig, facts: ModelFacts, build_runner: Callable[[TPGroup], Runner]
) -> Runner:
    """This process as rank 0 of config.tensor_parallel_size ranks: the workers started and joined, then
    build_runner(group) builds this rank's runner while they are watched."""
    size = config.tensor_parallel_size
    check_shardable(size, facts.shape)
    device = facts.device
    if device.type == "cuda":
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        # rank 0's heartbeats are the failure path (engine/parallel/liveness.py): NCCL's watchdog must
        # not take the engine's process down when they abort a group with a collective in flight
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    # rank 0 holds the rendezvous store, so it can watch every worker arrive instead of waiting in the
    # join for one that will never come
    store = dist.TCPStore(
        "127.0.0.1", 0, size, is_master=True, timeout=STARTUP_TIMEOUT, wait_for_workers=False
    )
    workers = WorkerProcesses([_spawn(config, store.port, rank) for rank in range(1, size)])
    built: dict = {}
    startup = threading.Thread(
        target=_build,
        args=(config, facts, device, store, workers, build_runner, built),
        name="tp-startup",
        daemon=True,
    )
    try:
        failure = _wait(lambda: store.add(ARRIVED, 0) < size - 1, workers)
        if failure is None:
            startup.start()
            failure = _wait(startup.is_alive, workers)
            # a worker gone: rank 0 may be failing at the same point for the same reason
            startup.join(1.0)
        error = built.get("error")
        if error is not None and not isinstance(error, RuntimeError):
            raise error  # rank 0's own (a user error, which every rank meets alike) says more
        if error is not None:
            failure = failure or workers.failure(wait_s=1.0)
        if failure is not None:
            raise TensorParallelError(f"{failure} during startup") from error
        if error is not None:
            raise error
    except BaseException:
        workers.stop(wait_s=0.0)
        if device.type == "cuda" and dist.is_initialized():
            # ends the collectives the startup thread may still wait in for a rank that is gone; on
            # the CPU they failed as soon as the workers were killed
            dist.distributed_c10d._abort_process_group()
        if startup.is_alive():
            startup.join(STOP_WAIT_S)
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    logger.info("tensor parallel: %d ranks over %s", size, dist.get_backend())
    return built["runner"]


def _wait(waiting: Callable[[], bool], workers: WorkerProcesses) -> str | None:
    """Until waiting() is false or a worker exits (which one, then)."""
    while waiting():
        failure = workers.failure()
        if failure is not None:
            return failure
        time.sleep(POLL_S)
    return None


def _build(
    config: EngineConfig,
    facts: ModelFacts,
    device: torch.device,
    store: dist.Store,
    workers: WorkerProcesses,
    build_runner: Callable[[TPGroup], object],
    built: dict,
):
    """Join the group and build the runner (in a thread: rank 0 watches the workers meanwhile)."""
    try:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        size = config.tensor_parallel_size
        # device_id: NCCL connects the ranks here, while all are known to be up, not at a first
        # collective that a rank dead since would leave waiting
        dist.init_process_group(
            backend,
            store=store,
            rank=0,
            world_size=size,
            timeout=STARTUP_TIMEOUT,
            device_id=device if device.type == "cuda" else None,
        )
        group = TPGroup(0, size, device, packed_capacity(config, facts.max_model_len), workers)
        runner = build_runner(group)
        group.start_steps()
        built["runner"] = runner
    except BaseException as e:
        built["error"] = e


def _spawn(config: EngineConfig, port: int, rank: int) -> subprocess.Popen:
    level = str(logging.getLogger().getEffectiveLevel())
    command = [sys.executable, "-m", "llmbench.engine.parallel.worker", str(port), str(rank)]
    command += [str(config.tensor_parallel_size), str(os.getpid()), level, str(torch.get_num_threads())]
    process = subprocess.Popen(command, stdin=subprocess.PIPE)
    # a worker that exits before reading its config (a broken interpreter, say) closes the pipe: the
    # startup wait names it with its exit code, as any rank that dies while starting. Let through, the
    # EPIPE would reach click, which takes it for a closed stdout and exits 1 without a word
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(msg.encoder.encode(config))
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()  # flushes, and closes the pipe even when the flush fails
    return process
