"""CUDA graphs for decode. A decode step of a large model is a few hundred short kernels; launched one by
one from Python, the host becomes the bottleneck at small batches. Each batch size of
config.cuda_graph_sizes (a bucket) gets one graph of the whole forward plus the LM head, captured once
after the KV pool exists. A batch is padded up to the smallest bucket that holds it and the graph is
replayed; larger batches and batches with prefill tokens run eagerly. The graph ends with the greedy
argmax of its logits, so an all-greedy step samples without a launch of its own.

A graph replays fixed addresses and shapes, so its inputs live in static buffers sized for the largest
bucket: each replay copies the step's inputs into them (device-to-device copies for a single-step
decode: ids, positions and lengths together, then slots, then block tables when they changed). The block
tables are as wide as max_model_len allows, which also keeps the decode kernel's split count (derived
from that width) fixed. Padding rows write their K/V into a spare block no sequence owns and attend to
that one row."""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable

import torch
from llmbench.engine.execution.kv_pool import KVCache
from llmbench.engine.execution.step_layout import AttentionMetadata, ModelInput, StepLayout
from llmbench.engine.models.llama import LlamaForCausalLM

logger = logging.getLogger(__name__)


def graph_bucket(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest capture size (sizes sorted ascending) holding num_seqs rows; None if none does."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


class DecodeGraphs:
    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_caches: list[KVCache],
        sizes: list[int],
        max_blocks_per_seq: int,
        pad_block: int,
        block_size: int,
        argmax: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ):
        self.model = model
        # greedy sampling inside the graph: an all-greedy step then launches nothing after the replay
        self.argmax = argmax
        self.kv_caches = kv_caches
        self.sizes = sorted(sizes)
        self.pad_slot = pad_block * block_size
        device = kv_caches[0][0].device
        max_seqs = self.sizes[-1]

        def ints(fill: int, *shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.full(shape, fill, dtype=dtype, device=device)

        # every row starts as padding: one token at the spare block's first slot. Input ids,
        # positions and lengths are rows of one tensor, laid out as InputBuffers packs a decode
        self.decode_rows = ints(0, 3, -(-max_seqs // 4) * 4)  # each row 16-byte aligned
        self.input_ids, self.positions, self.seq_lens = self.decode_rows
        self.seq_lens.fill_(1)
        self.slot_mapping = ints(self.pad_slot, max_seqs, dtype=torch.int64)
        self.block_tables = ints(pad_block, max_seqs, max_blocks_per_seq)
        self.query_start_loc = torch.arange(max_seqs + 1, dtype=torch.int32, device=device)
        self._num_live = 0  # rows from 0 whose slots may still point at live KV
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.tokens: dict[int, torch.Tensor] = {}  # each bucket's argmax of its logits
        # the last step's views: ((num_seqs, width), its slices of the static inputs), (num_seqs, outputs)
        self._targets: tuple = ((0, 0),)
        self._outputs: tuple = (0, None, None)
        self._tables_version: int | None = None  # of the block tables last copied in

    def handles(self, layout: StepLayout) -> bool:
        """Graphs serve decode steps (every row sampled) that fit a bucket."""
        return layout.decode_only and graph_bucket(layout.num_seqs, self.sizes) is not None

    def load(self, inputs: ModelInput) -> int:
        """Copy a decode step's inputs into the static buffers; returns the bucket to run."""
        num_seqs = inputs.input_ids.shape[0]
        attn = inputs.attn
        width = attn.block_tables.shape[1]
        if self._targets[0] != (num_seqs, width):
            # a steady decode keeps its shape for block_size steps: slicing the same views again would
            # cost a torch call each (several us on a GPU host)
            rows = self.decode_rows[:, :num_seqs]
            ids, positions, seq_lens = rows
            self._targets = ((num_seqs, width), rows, ids, positions, seq_lens, self.slot_mapping[:num_seqs])
            self._targets += (self.block_tables[:num_seqs, :width],)
        _, rows, ids, positions, seq_lens, slots, tables = self._targets
        if inputs.decode_rows is not None:
            rows.copy_(inputs.decode_rows, non_blocking=True)
        else:  # a later forward of a window: its input ids are the tokens just sampled
            ids.copy_(inputs.input_ids, non_blocking=True)
            positions.copy_(inputs.positions, non_blocking=True)
            seq_lens.copy_(attn.seq_lens, non_blocking=True)
        slots.copy_(attn.slot_mapping, non_blocking=True)
        # a steady decode's tables change once every block_size steps: until then the static copy holds
        if inputs.tables_version is None or inputs.tables_version != self._tables_version:
            tables.copy_(attn.block_tables, non_blocking=True)
            self._tables_version = inputs.tables_version
        # rows past the batch may hold an earlier, larger batch's slots: point their writes back
        # at the spare block (stale lengths and tables only cause harmless reads). Only when the
        # batch shrank: a steady decode batch launches no fill
        if self._num_live > num_seqs:
            self.slot_mapping[num_seqs : self._num_live].fill_(self.pad_slot)
        self._num_live = num_seqs
        return graph_bucket(num_seqs, self.sizes)

    def forward(self, bucket: int) -> torch.Tensor:
        """Logits [bucket, vocab] of the static buffers' first `bucket` rows: what each graph captures."""
        attn = AttentionMetadata(
            slot_mapping=self.slot_mapping[:bucket],
            block_tables=self.block_tables[:bucket],
            seq_lens=self.seq_lens[:bucket],
            query_start_loc=self.query_start_loc[: bucket + 1],
            decode_only=True,
        )
        hidden = self.model(self.input_ids[:bucket], self.positions[:bucket], attn, self.kv_caches)
        return self.model.compute_logits(hidden)

    def run(self, inputs: ModelInput) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits [num_seqs, vocab] of a decode step, by replaying its bucket's graph, and their
        argmax [num_seqs] when the graphs compute it. Both are the graph's output buffers, which the
        next replay overwrites: what reads them is queued before it."""
        bucket = self.load(inputs)
        self.graphs[bucket].replay()
        num_seqs = inputs.input_ids.shape[0]
        if self._outputs[0] != num_seqs:
            tokens = self.tokens[bucket][:num_seqs] if self.tokens else None
            self._outputs = (num_seqs, self.logits[bucket][:num_seqs], tokens)
        return self._outputs[1], self._outputs[2]

    @torch.inference_mode()
    def capture(self) -> None:
        """One graph per bucket, largest first so the smaller ones fit in the memory pool it leaves.
        The static buffers hold padding rows only, so neither warm-up nor capture touches live KV."""
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for bucket in reversed(self.sizes):
                # warm-up outside the graph: compiles this bucket's kernel variants
                logits = self.forward(bucket)
                if self.argmax is not None:
                    self.argmax(logits)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self.logits[bucket] = self.forward(bucket)
                    if self.argmax is not None:
                        self.tokens[bucket] = self.argmax(self.logits[bucket])
                self.graphs[bucket] = graph
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        logger.info("captured decode CUDA graphs for batch sizes %s", self.sizes)
