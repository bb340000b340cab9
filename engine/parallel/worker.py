"""A tensor-parallel worker: rank 1..size-1 of the group, a process of its own started by rank 0
(engine/parallel/launch.py). It holds its shard of the weights and of the KV pool, and runs every
forward rank 0 runs, from the buffer rank 0 broadcasts each step; it never schedules or samples. It
exits when rank 0 shuts the group down, when a collective fails, or when its parent is gone (checked
twice a second from a thread: the main thread waits inside collectives)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from llmbench.engine.core import core_messages as msg
from llmbench.engine.execution.model_runner import ModelRunner
from llmbench.engine.execution.step_layout import unpack
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.parallel.group import STARTUP_TIMEOUT, TPGroup, packed_capacity
from llmbench.engine.parallel.launch import ARRIVED

PARENT_CHECK_S = 0.5


def run_worker(port: int, rank: int, size: int, parent_pid: int, log_level: int, threads: int) -> None:
    # Ctrl-C reaches the whole process group: rank 0 handles it and shuts the workers down
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=f"tp rank {rank}: %(message)s")
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    torch.set_num_threads(threads)
    config = msg.config_decoder.decode(sys.stdin.buffer.read())
    facts = resolve_model_facts(config)  # from the config rank 0 resolved its own from: the same facts
    device = facts.device
    if device.type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    store = dist.TCPStore("127.0.0.1", port, size, is_master=False, timeout=STARTUP_TIMEOUT)
    store.add(ARRIVED, 1)  # rank 0 joins the group once every worker got this far
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        store=store,
        rank=rank,
        world_size=size,
        timeout=STARTUP_TIMEOUT,
        device_id=device if device.type == "cuda" else None,
    )
    group = TPGroup(rank, size, device, packed_capacity(config, facts.max_model_len))
    runner = ModelRunner(config, facts, group)
    group.start_steps()
    serve(runner, group)
    runner.shutdown()


@torch.inference_mode()
def serve(runner: ModelRunner, group: TPGroup) -> None:
    """Run each step rank 0 sends until it sends the shutdown."""
    while (step := group.receive_step()) is not None:
        layout, use_graphs, packed = step
        window = inputs = unpack(packed, layout)[0]
        for k in range(layout.num_steps):
            if k:  # a window's later forward: its input ids are the tokens rank 0 just sampled
                inputs = window.next_forward(k, group.receive_tokens(layout.num_sample))
            runner.logits(inputs, use_graphs)
    group.shutdown()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


if __name__ == "__main__":
    # started as `python -m llmbench.engine.parallel.worker STORE_PORT RANK SIZE PARENT_PID LOG_LEVEL
    # THREADS`, the msgpack-encoded EngineConfig on stdin
    run_worker(*map(int, sys.argv[1:7]))
