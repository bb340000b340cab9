"""Rank 0's side of a tensor-parallel engine: start one worker process per other rank (a fresh
interpreter each, `python -m engine.parallel.worker`), join them in torch.distributed (NCCL on CUDA,
gloo on the CPU) and build this rank's model runner. The worker processes are watched: one that
exits is named in the engine's error, and every one is gone after shutdown."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from engine import core_messages as msg
from engine.config import EngineConfig
from engine.loader import model_shape, resolve_device
from engine.parallel.group import STARTUP_TIMEOUT, STOP_WAIT_S, TPGroup

logger = logging.getLogger(__name__)


class WorkerProcesses:
    """The processes of ranks 1..size-1, in rank order."""

    def __init__(self, processes: list[subprocess.Popen]):
        self.processes = processes

    def failure(self, wait_s: float = 0.0) -> str | None:
        """Which rank exited, if one did; waits up to wait_s for one to (a collective that just
        failed: its peer may still be on the way out)."""
        deadline = time.monotonic() + wait_s
        while True:
            for rank, process in enumerate(self.processes, 1):
                code = process.poll()
                if code is not None:
                    return f"tensor-parallel rank {rank} exited with code {code}"
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def check_shardable(config: EngineConfig) -> None:
    """Head and MLP counts that split evenly over the ranks, checked before any process starts."""
    size, shape = config.tensor_parallel_size, model_shape(config.model)
    for count, what in ((shape.num_kv_heads, "KV heads"), (shape.intermediate_size, "MLP channels")):
        if count % size:
            raise ValueError(f"engine.tensor_parallel_size {size} does not divide the model's {count} {what}")


def start_runner(config: EngineConfig):
    """This process's ModelRunner as rank 0 of config.tensor_parallel_size ranks."""
    from engine.model_runner import ModelRunner

    check_shardable(config)
    size = config.tensor_parallel_size
    device = resolve_device(config.model.device)
    address = f"tcp://127.0.0.1:{_free_port()}"
    workers = WorkerProcesses([_spawn(config, address, rank) for rank in range(1, size)])
    try:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(0)
        dist.init_process_group(
            backend, init_method=address, rank=0, world_size=size, timeout=STARTUP_TIMEOUT
        )
        group = TPGroup(0, size, device, workers)
        runner = ModelRunner(config, group)
    except BaseException:
        workers.stop(wait_s=0.0)
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    group.start_steps()
    logger.info("tensor parallel: %d ranks over %s", size, backend)
    return runner


def _spawn(config: EngineConfig, address: str, rank: int) -> subprocess.Popen:
    level = str(logging.getLogger().getEffectiveLevel())
    command = [sys.executable, "-m", "engine.parallel.worker", address, str(rank)]
    command += [str(config.tensor_parallel_size), str(os.getpid()), level, str(torch.get_num_threads())]
    process = subprocess.Popen(command, stdin=subprocess.PIPE)
    process.stdin.write(msg.encoder.encode(config))
    process.stdin.close()
    return process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
