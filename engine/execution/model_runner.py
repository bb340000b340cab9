"""The executor with a real model: loads weights, owns the paged KV pool, and turns each ScheduledBatch
into sampled tokens (prepare inputs -> forward -> logits of the sampled rows -> sample)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import replace

import numpy as np
import torch
from llmbench.engine.config import EngineConfig
from llmbench.engine.execution.cuda_graphs import DecodeGraphs, graph_bucket
from llmbench.engine.execution.input_batch import InputBuffers
from llmbench.engine.execution.kernel_choice import checked_ops
from llmbench.engine.execution.kv_pool import KVPool
from llmbench.engine.execution.sampler import Sampler
from llmbench.engine.execution.step_layout import ModelInput
from llmbench.engine.loading.loader import load_model
from llmbench.engine.loading.model_facts import ModelFacts
from llmbench.engine.observe.nvtx_ranges import nvtx_ranges, phase_range
from llmbench.engine.outputs.in_flight import ForwardTokens
from llmbench.engine.outputs.token_readback import TokenReadback
from llmbench.engine.parallel.group import LOCAL, Group
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq
from llmbench.kernels import flash_attention, pdl
from llmbench.kernels.attention_split import plan_attention_split, sdpa_backends

logger = logging.getLogger(__name__)


class ModelRunner:
    """One rank's runner: with tensor parallelism, rank 0's runs the engine's steps and sends each
    one's inputs to the other ranks (engine/parallel/worker.py runs them there)."""

    def __init__(self, config: EngineConfig, facts: ModelFacts, group: Group = LOCAL):
        self.config = config
        self.group = group
        self.block_size = config.block_size
        self.shape, self.max_model_len, self.device = facts.shape, facts.max_model_len, facts.device
        ops = checked_ops(config, facts)
        pdl.set_enabled(config.dependent_launch)  # before any kernel runs or a graph is captured
        self.model = load_model(config.model, facts, ops, group)
        self.sampler = Sampler(
            self.shape.eos_token_id, self.shape.vocab_size, self.device, config.model.seed, ops
        )
        self._forward_range = phase_range(nvtx_ranges(), "forward")
        self.inputs = InputBuffers(self.block_size, self.device)
        # the forwards of the step in flight and of the next one, and one spare
        self.readback = TokenReadback(self.device, config.max_num_seqs, 2 * config.num_scheduler_steps + 1)
        self.graphs: DecodeGraphs | None = None
        self.kv_pool = KVPool(config, facts, group.size)
        free_kv_bytes = self._profile_free_memory() if self.device.type == "cuda" else None
        self.num_blocks = group.min_int(self.kv_pool.num_blocks(free_kv_bytes))  # every rank's pool alike
        # one spare block past those the block manager hands out: padding rows of a graph write there
        self.kv_caches = self.kv_pool.allocate(self.num_blocks + 1)
        logger.info(
            "KV pool: %d blocks of %d tokens (%.2f GiB)",
            self.num_blocks,
            self.block_size,
            self.num_blocks * self.kv_pool.block_bytes / 2**30,
        )
        if config.prefill_attention == "flash":  # compiled now: a compile in a timed run stalls it
            num_heads = self.model.layers[0].self_attn.num_heads  # this rank's
            flash_attention.compile_variants(*self.kv_caches[0], num_heads, config.max_num_seqs)
        if config.cuda_graphs:
            self.graphs = self._capture_graphs()

    def execute(
        self, batch: ScheduledBatch, before_launch: Callable[[], object] | None = None
    ) -> Iterator[ForwardTokens]:
        """Each forward's sampled token ids [n_sample], left on the device with their host copy under
        way: reading one is the caller's wait for that forward alone. before_launch runs once the
        inputs are prepared, just before the first forward is launched (the step's GPU start event).
        On a GPU every forward is launched before the first is yielded, so the device never waits for
        the host between them; on the CPU a forward runs when the caller asks for its tokens, so it has
        the ones before in hand first."""
        with torch.inference_mode():
            window = self.inputs.prepare(batch)  # every forward's inputs, in one copy
            layout = self.inputs.layout
            seqs = batch.seqs
            self.sampler.prepare(
                seqs if layout.num_sample == len(seqs) else [s for s in seqs if s.sample], batch.num_steps
            )
            use_graphs = self.graphs is not None and self.graphs.handles(layout)
            self.group.send_step(self.inputs.packed, layout, use_graphs)
            if before_launch is not None:
                before_launch()
            # tensor parallel: every forward at once, as on a GPU, since the other ranks run each window
            # whole; inside this inference-mode block, whose entry and exit cost a GPU host several us
            lazy = self.device.type != "cuda" and self.group.size == 1
            launched: list[ForwardTokens] = []
            if not lazy:
                for step in range(batch.num_steps):
                    self._launch_forward(window, step, launched, use_graphs)
        if not lazy:
            yield from launched
            return
        for step in range(batch.num_steps):
            with torch.inference_mode():
                self._launch_forward(window, step, launched, use_graphs)
            yield launched[-1]

    def _launch_forward(
        self, window: ModelInput, step: int, launched: list[ForwardTokens], use_graphs: bool
    ) -> None:
        """Forward `step` of the window, its tokens' host copy started, appended to `launched`."""
        if step:
            self.group.send_tokens(launched[-1].device)
        inputs = window.next_forward(step, launched[-1].device) if step else window
        launched.append(self.readback(self._sample(inputs, use_graphs, step)))

    def _sample(self, inputs: ModelInput, use_graphs: bool, step: int) -> torch.Tensor:
        """One forward and its sampled tokens; a graph's own argmax serves the greedy rows."""
        if not use_graphs:
            return self.sampler(self.logits(inputs, use_graphs), step)
        with self._forward_range:
            logits, greedy = self.graphs.run(inputs)
        return self.sampler(logits, step, greedy)

    def logits(self, inputs: ModelInput, use_graphs: bool) -> torch.Tensor:
        """One forward: logits of the sampled rows (on a worker rank: its vocabulary slice)."""
        with self._forward_range:
            if use_graphs:
                return self.graphs.run(inputs)[0]
            attn, backends = inputs.attn, nullcontext()
            if not attn.decode_only:
                split = plan_attention_split(
                    *self._host_lens(inputs),
                    attn.block_tables,
                    attn.seq_lens,
                    self.config.prefill_attention,
                    self.block_size,
                )
                if split is not None:
                    attn = replace(attn, split=split)
                    backends = sdpa_backends() if split.groups else backends
            with backends:
                hidden = self.model(inputs.input_ids, inputs.positions, attn, self.kv_caches)
            return self.model.compute_logits(hidden[inputs.sample_rows])

    @staticmethod
    def _host_lens(inputs: ModelInput) -> tuple[np.ndarray, np.ndarray]:
        if inputs.host_lens is not None:
            return inputs.host_lens
        # a tensor-parallel worker has only the device copy: reading it waits for the step's broadcast
        # (once per prefill step, on the workers alone; rank 0 never waits here)
        return inputs.attn.query_start_loc.cpu().numpy(), inputs.attn.seq_lens.cpu().numpy()

    def take_comm_ms(self) -> float:
        """Milliseconds in tensor-parallel collectives since the last call."""
        return self.group.take_comm_ms()

    def shutdown(self) -> None:
        if self.group.rank == 0:
            self.group.shutdown()
        self.kv_caches = []
        self.graphs = None
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _capture_graphs(self) -> DecodeGraphs | None:
        if self.device.type != "cuda":
            logger.warning("cuda_graphs needs a CUDA device; decode runs eagerly on %s", self.device)
            return None
        # buckets past the one holding max_num_seqs would never be used
        all_sizes = self.config.cuda_graph_sizes
        largest = graph_bucket(self.config.max_num_seqs, all_sizes) or all_sizes[-1]
        sizes = [s for s in all_sizes if s <= largest]
        graphs = DecodeGraphs(
            self.model,
            self.kv_caches,
            sizes,
            max_blocks_per_seq=-(-self.max_model_len // self.block_size),
            pad_block=self.num_blocks,
            block_size=self.block_size,
            # a worker rank samples nothing: its logits are a vocabulary slice
            argmax=self.sampler.argmax if self.group.rank == 0 else None,
        )
        graphs.capture()
        return graphs

    def _profile_free_memory(self) -> int:
        """Bytes the KV pool may take under gpu_memory_utilization: run the largest step the scheduler
        can produce on a throwaway pool to find the activation peak (this also compiles the kernels)."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        batch = self._warm_up_batch()
        self.kv_caches = self.kv_pool.allocate(sum(len(s.block_table) for s in batch.seqs))
        if self.group.rank == 0:
            list(self.execute(batch))
        else:  # a worker rank runs the same forward, and samples nothing
            self.logits(self.inputs.prepare(batch), use_graphs=False)
        torch.cuda.synchronize()
        activation_peak = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()
        self.kv_caches = []
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        return int(total * self.config.gpu_memory_utilization - (total - free) - activation_peak)

    def _warm_up_batch(self) -> ScheduledBatch:
        """max_num_batched_tokens tokens: one long prompt chunk (attention's worst case) plus one token
        for each other sequence slot (the LM head and sampler's worst case)."""
        c = self.config
        # without chunked prefill a lone prompt may exceed the token budget, up to max_model_len
        budget = (
            c.max_num_batched_tokens
            if c.chunked_prefill
            else max(c.max_num_batched_tokens, self.max_model_len)
        )
        num_tokens = min(budget, c.max_num_seqs * self.max_model_len)
        num_seqs = min(c.max_num_seqs, num_tokens)
        lengths = [min(self.max_model_len, num_tokens - (num_seqs - 1))] + [1] * (num_seqs - 1)
        seqs, next_block = [], 0
        for i, length in enumerate(lengths):
            num_blocks = -(-length // self.block_size)
            table = list(range(next_block, next_block + num_blocks))
            next_block += num_blocks
            seqs.append(ScheduledSeq(i, [0] * length, 0, length, table, SamplingParams(), sample=True))
        return ScheduledBatch(seqs)
