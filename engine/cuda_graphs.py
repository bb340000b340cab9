"""CUDA graphs for decode. A decode step of a large model is a few hundred short kernels; launched one by
one from Python, the host becomes the bottleneck at small batches. Each batch size of
config.cuda_graph_sizes (a bucket) gets one graph of the whole forward plus the LM head, captured once
after the KV pool exists. A batch is padded up to the smallest bucket that holds it and the graph is
replayed; larger batches and batches with prefill tokens run eagerly.

A graph replays fixed addresses and shapes, so its inputs live in static buffers sized for the largest
bucket: each replay copies the step's inputs into them (three device-to-device copies for a
single-step decode: ids, positions and lengths together, then slots, then block tables). The block
tables are as wide as max_model_len allows, which also keeps the decode kernel's split count (derived
from that width) fixed. Padding rows write their K/V into a spare block no sequence owns and attend to
that one row."""

from __future__ import annotations

import bisect
import logging

import torch

from engine.batch import ScheduledBatch
from engine.input_batch import ModelInput
from engine.models.llama import AttentionMetadata, KVCache, LlamaForCausalLM

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
    ):
        self.model = model
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

    def handles(self, batch: ScheduledBatch) -> bool:
        """Graphs serve decode batches (every row sampled) that fit a bucket."""
        return batch.is_decode_only and graph_bucket(len(batch.seqs), self.sizes) is not None

    def load(self, inputs: ModelInput) -> int:
        """Copy a decode step's inputs into the static buffers; returns the bucket to run."""
        num_seqs = inputs.input_ids.shape[0]
        bucket = graph_bucket(num_seqs, self.sizes)
        attn = inputs.attn
        width = attn.block_tables.shape[1]
        if inputs.decode_rows is not None:
            self.decode_rows[:, :num_seqs].copy_(inputs.decode_rows, non_blocking=True)
        else:  # a later forward of a window: its input ids are the tokens just sampled
            self.input_ids[:num_seqs].copy_(inputs.input_ids, non_blocking=True)
            self.positions[:num_seqs].copy_(inputs.positions, non_blocking=True)
            self.seq_lens[:num_seqs].copy_(attn.seq_lens, non_blocking=True)
        self.slot_mapping[:num_seqs].copy_(attn.slot_mapping, non_blocking=True)
        self.block_tables[:num_seqs, :width].copy_(attn.block_tables, non_blocking=True)
        # rows past the batch may hold an earlier, larger batch's slots: point their writes back
        # at the spare block (stale lengths and tables only cause harmless reads). Only when the
        # batch shrank: a steady decode batch launches no fill
        if self._num_live > num_seqs:
            self.slot_mapping[num_seqs : self._num_live].fill_(self.pad_slot)
        self._num_live = num_seqs
        return bucket

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

    def run(self, inputs: ModelInput) -> torch.Tensor:
        """Logits [num_seqs, vocab] of a decode step, by replaying its bucket's graph."""
        bucket = self.load(inputs)
        self.graphs[bucket].replay()
        return self.logits[bucket][: inputs.input_ids.shape[0]]

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
                self.forward(bucket)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self.logits[bucket] = self.forward(bucket)
                self.graphs[bucket] = graph
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        logger.info("captured decode CUDA graphs for batch sizes %s", self.sizes)
