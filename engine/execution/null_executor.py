"""An executor without a model: it answers every step with tokens derived from (seq_id, position). It
still does the model runner's host work before a forward, with the model runner's own code: the
step's model inputs, built into host buffers, and the sampler's parameters. So running the engine on
it measures the host's whole CPU cost (scheduling, input preparation, output processing) on any
machine, the part a GPU host pays that no forward hides.

By default the tokens are there at once. With model.null_forward_ms each forward takes that long on a
simulated device: forwards run one after another, each from its launch or the previous one's end,
and reading a forward's tokens sleeps until it is done, as a host blocked on a GPU does. That brings
a GPU host's timing to any machine: the overlap toggles hide host time behind the forwards, the host
work after each wait runs on caches other work used meanwhile, and the engine's GPU timer reads the
simulated device's step spans (GPU busy and idle, of that device)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from llmbench.engine.config import EngineConfig
from llmbench.engine.execution.input_batch import InputBuffers
from llmbench.engine.execution.sampler import Sampler
from llmbench.engine.loading.model_facts import ModelFacts
from llmbench.engine.outputs.in_flight import ForwardTokens
from llmbench.engine.scheduling.batch import ScheduledBatch

logger = logging.getLogger(__name__)

_MAX_DEFAULT_BLOCKS = 1 << 18
_MAX_BLOCKS = 1 << 24  # 64 bytes of block-manager state a block (measured): 1 GiB of host memory here


class SimulatedForwards:
    """The device of null_forward_ms: a queue of forwards of equal length, run in launch order. Its
    events stand where CUDA events would in a stream, so the engine's GPU timer reads it as a device."""

    def __init__(
        self,
        forward_ms: float,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.forward_s = forward_ms / 1e3
        self.clock, self.sleep = clock, sleep
        self._free_at = 0.0  # when the last forward launched ends

    def tail(self) -> float:
        """When work queued now would start: now, or when the last forward launched ends."""
        return max(self.clock(), self._free_at)

    def launch(self, count: int) -> list[SimulatedEvent]:
        """`count` forwards launched now, behind those still running; when each one's tokens are out."""
        start = self.tail()
        done = [SimulatedEvent(self, start + (k + 1) * self.forward_s) for k in range(count)]
        self._free_at = done[-1].at
        return done

    def event(self) -> SimulatedEvent:
        """An event to record in the queue later (the GPU timer's step start and end)."""
        return SimulatedEvent(self)


class SimulatedEvent:
    """A point in the simulated device's queue, as a CUDA event is in a stream: a forward's end (what
    ForwardTokens.copied is on CUDA), or the queue's tail when recorded."""

    __slots__ = ("at", "_device")

    def __init__(self, device: SimulatedForwards, at: float = math.inf):
        self.at = at
        self._device = device

    def record(self, stream: object = None) -> None:
        self.at = self._device.tail()

    def query(self) -> bool:
        return self._device.clock() >= self.at

    def synchronize(self) -> None:
        left = self.at - self._device.clock()
        if left > 0:
            self._device.sleep(left)

    def elapsed_time(self, end: SimulatedEvent) -> float:
        """Milliseconds from this event to `end`, as torch.cuda.Event.elapsed_time."""
        return (end.at - self.at) * 1e3


class NullExecutor:
    def __init__(self, config: EngineConfig, facts: ModelFacts):
        self.shape, self.max_model_len, self.device = facts.shape, facts.max_model_len, facts.device
        self.num_blocks = self._num_blocks(config, facts.dtype.itemsize)
        self.inputs = InputBuffers(config.block_size, self.device)
        self.sampler = Sampler(self.shape.eos_token_id, self.shape.vocab_size, self.device, config.model.seed)
        forward_ms = config.model.null_forward_ms
        self.forwards = SimulatedForwards(forward_ms) if forward_ms else None
        logger.info("null executor: %d KV blocks, max_model_len %d", self.num_blocks, self.max_model_len)

    def _num_blocks(self, config: EngineConfig, dtype_bytes: int) -> int:
        """Sized as the model runner would for the same settings, so preemption behaves alike."""
        if config.num_gpu_blocks is not None:
            return _trackable(config.num_gpu_blocks, "engine.num_gpu_blocks")
        if config.kv_cache_memory_gb is not None:
            block_bytes = self.shape.kv_bytes_per_token(dtype_bytes) * config.block_size
            num_blocks = max(1, int(config.kv_cache_memory_gb * 2**30 // block_bytes))
            return _trackable(num_blocks, "engine.kv_cache_memory_gb")
        # large enough that nothing is ever preempted, capped to stay cheap for 128k-context presets
        blocks_per_seq = -(-self.max_model_len // config.block_size)
        return min(config.max_num_seqs * blocks_per_seq, _MAX_DEFAULT_BLOCKS)

    def take_comm_ms(self) -> float:
        return 0.0  # one process: no collectives

    def execute(
        self, batch: ScheduledBatch, before_launch: Callable[[], object] | None = None
    ) -> Iterator[ForwardTokens]:
        """Each forward's tokens [n_sample]: the one sampled at position p of sequence s is a hash of
        (s, p), so any batching, chunking or multi-step window yields the same tokens. before_launch
        runs where the model runner's does, once the inputs are prepared (the step's timer start)."""
        # what a GPU host does before launching the forward
        inputs = self.inputs.prepare(batch)
        sampled = [s for s in batch.seqs if s.sample]
        self.sampler.prepare(sampled, batch.num_steps)
        ids = np.array([s.seq_id for s in sampled], dtype=np.int64)
        # where each first sampled token lands: one past its sequence's last new token
        positions = inputs.positions.numpy()[inputs.sample_rows.numpy()] + 1
        steps = np.arange(batch.num_steps)[:, None]
        tokens = (ids * 1_000_003 + (positions + steps) * 7_919) % (self.shape.vocab_size - 1)
        tokens += tokens >= self.shape.eos_token_id  # skip EOS
        if before_launch is not None:
            before_launch()
        # a window's forwards are all launched at once, as the model runner launches them on a GPU
        done = self.forwards.launch(batch.num_steps) if self.forwards else [None] * batch.num_steps
        for row, copied in zip(torch.from_numpy(tokens), done, strict=True):
            yield ForwardTokens(row, row, copied)

    def shutdown(self) -> None:
        pass


def _trackable(num_blocks: int, key: str) -> int:
    """No KV memory backs the null executor's pool, but the block manager keeps host-side state for
    every block: past _MAX_BLOCKS that alone would take gigabytes."""
    if num_blocks > _MAX_BLOCKS:
        raise ValueError(
            f"{key}: {num_blocks} KV blocks is more than the null executor's block manager tracks "
            f"(at most {_MAX_BLOCKS})"
        )
    return num_blocks
