"""Turn a ScheduledBatch into the model's tensors: flattened token ids and positions, where each new
token's K/V goes (slot mapping), and each sequence's block table, length and row range; for a
multi-step window, the positions, slots and lengths of every forward.

Runs every step with up to max_num_seqs sequences, so it touches each sequence a few times in list
comprehensions and does the rest in numpy, never a Python loop over tokens or blocks. Block tables
persist across steps (vLLM V1's persistent batch): each table gets a row of a host array when first
seen, and later steps write only the blocks appended to it since. All integer inputs of a step are
packed into one host buffer (pinned on CUDA) and sent in a single non-blocking copy to one device
buffer; the model's inputs are views of it. On the CPU the host buffer is the device buffer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from engine.batch import ScheduledBatch, ScheduledSeq
from engine.models.llama import AttentionMetadata

_ALIGN = 4  # int32 entries in 16 bytes


def _padded(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


@dataclass
class ModelInput:
    input_ids: torch.Tensor  # [T] int32 or int64
    positions: torch.Tensor  # [T] int32
    attn: AttentionMetadata
    sample_rows: torch.Tensor  # [n_sample]: the row of each sampled sequence's last new token
    # multi-step: positions and attention metadata of the window's later forwards
    later: list[tuple[torch.Tensor, AttentionMetadata]] = field(default_factory=list)
    # a single-step decode's input ids, positions and lengths as one [3, n] view of the packed
    # buffer: a graph's static inputs take them in one copy
    decode_rows: torch.Tensor | None = None
    # a single-step batch's row offsets [B + 1] and lengths [B] on the host, where input preparation
    # computed them: a prefill split is planned from these without reading the device back
    host_lens: tuple[np.ndarray, np.ndarray] | None = None

    def next_forward(self, step: int, sampled: torch.Tensor) -> ModelInput:
        """Forward `step` (>= 1) of a multi-step window: its input tokens are those just sampled."""
        positions, attn = self.later[step - 1]
        return ModelInput(sampled, positions, attn, self.sample_rows)


class StepLayout(NamedTuple):
    """Everything needed to find one step's tensors in its packed buffer: with it, another tensor-
    parallel rank rebuilds the model inputs from the buffer alone."""

    num_seqs: int
    num_tokens: int
    num_steps: int
    width: int  # block table entries per sequence
    num_sample: int
    num_feed: int
    decode_only: bool

    def sections(self) -> tuple[list[int], list[int]]:
        """Each section's size and start, in int32 entries; the last start is the buffer's size. Each
        section starts on a 16-byte boundary, and so does each forward's row of a window (Triton
        specializes kernels on pointer alignment: an unaligned view would compile a second variant of
        a kernel mid-run, ~0.7 s on an H200, when the batch's shape shifts the sections)."""
        n, t, k = self.num_seqs, self.num_tokens, self.num_steps
        sizes = [t, k * _padded(t), k * _padded(n), n + 1, self.num_sample, n * self.width]
        sizes += [2 * k * _padded(t), self.num_feed, self.num_feed]
        return sizes, np.cumsum([0] + [_padded(size) for size in sizes]).tolist()


def unpack(packed: torch.Tensor, layout: StepLayout) -> tuple[ModelInput, torch.Tensor, torch.Tensor]:
    """The model inputs as views of a step's packed buffer, and the async-output feed rows and
    columns."""
    n, num_tokens, num_steps, width = layout.num_seqs, layout.num_tokens, layout.num_steps, layout.width
    sizes, starts = layout.sections()
    ids, positions, seq_lens, query_start, sample_rows, tables, slots, feed_rows, feed_cols = (
        packed[start : start + size] for start, size in zip(starts, sizes, strict=False)
    )
    slots = slots.view(torch.int64)
    tables = tables.view(n, width)
    decode_only = layout.decode_only
    if num_steps == 1:
        attn = AttentionMetadata(slots[:num_tokens], tables, seq_lens[:n], query_start, decode_only)
        decode_rows = None
        if num_tokens == n:  # sections 0-2 are then three rows of row_n
            decode_rows = packed[: starts[3]].view(3, _padded(n))[:, :n]
        inputs = ModelInput(ids, positions[:num_tokens], attn, sample_rows, decode_rows=decode_rows)
        return inputs, feed_rows, feed_cols
    # a window: one row per forward
    row_t, row_n = _padded(num_tokens), _padded(n)
    positions = positions.view(num_steps, row_t)[:, :num_tokens]
    seq_lens = seq_lens.view(num_steps, row_n)[:, :n]
    slots = slots.view(num_steps, row_t)[:, :num_tokens]
    attns = [
        AttentionMetadata(slots[k], tables, seq_lens[k], query_start, decode_only) for k in range(num_steps)
    ]
    later = [(positions[k], attns[k]) for k in range(1, num_steps)]
    return ModelInput(ids, positions[0], attns[0], sample_rows, later), feed_rows, feed_cols


class BlockTables:
    """Every block table seen lately, one row each of a host array. A table is keyed by the list
    object itself, which a sequence only ever appends to (freeing its blocks gives it a new list), so
    a row stays valid and a step copies only the blocks appended since the last one. Rows of tables
    no batch holds any more are reused once the array is full."""

    def __init__(self, rows: int = 64, width: int = 64):
        self.table = np.zeros((rows, width), dtype=np.int32)
        self._row_of: dict[int, int] = {}  # id(block table list) -> row
        self._lists: list[list[int] | None] = [None] * rows  # holding each list keeps its id unique
        self._filled = np.zeros(rows, dtype=np.int64)  # blocks of the list already in the row
        self._free = list(range(rows - 1, -1, -1))

    def rows(self, seqs: list[ScheduledSeq]) -> tuple[np.ndarray, np.ndarray]:
        """The row of each sequence's table, brought up to date, and each table's length. Three
        comprehensions over the batch; only the tables that grew are written."""
        tables = [s.block_table for s in seqs]
        rows = list(map(self._row_of.get, map(id, tables)))
        lengths = np.fromiter(map(len, tables), np.int64, len(tables))
        if None in rows:
            self._add(tables, rows)
        rows_np = np.fromiter(rows, np.int64, len(rows))
        longest = int(lengths.max())
        if longest > self.table.shape[1]:
            self._widen(longest)
        filled = self._filled[rows_np]
        for i in np.flatnonzero(lengths != filled).tolist():  # a new block every block_size tokens
            start, row = int(filled[i]), rows[i]
            self.table[row, start : lengths[i]] = tables[i][start:]
        self._filled[rows_np] = lengths
        return rows_np, lengths

    def _add(self, tables: list[list[int]], rows: list[int | None]) -> None:
        """Give each table without a row one (a table named twice in a batch gets one row)."""
        for i, row in enumerate(rows):
            if row is None:
                row = self._row_of.get(id(tables[i]))
            if row is None:
                if not self._free:
                    self._make_room({r for r in rows if r is not None})
                row = self._free.pop()
                self._row_of[id(tables[i])] = row
                self._lists[row] = tables[i]
                self._filled[row] = 0
                self.table[row] = 0  # padding past the table reads block 0, as a fresh row does
            rows[i] = row

    def _make_room(self, in_use: set[int]) -> None:
        """Drop every row this batch does not use; grow when that frees too little."""
        for key, row in list(self._row_of.items()):
            if row not in in_use:
                del self._row_of[key]
                self._lists[row] = None
                self._free.append(row)
        if len(self._free) < len(self._lists) // 2:
            old = len(self._lists)
            self.table = np.concatenate([self.table, np.zeros_like(self.table)])
            self._filled = np.concatenate([self._filled, np.zeros_like(self._filled)])
            self._lists += [None] * old
            self._free += range(2 * old - 1, old - 1, -1)

    def _widen(self, width: int) -> None:
        grown = np.zeros((self.table.shape[0], max(width, 2 * self.table.shape[1])), dtype=np.int32)
        grown[:, : self.table.shape[1]] = self.table
        self.table = grown


class InputBuffers:
    """The persistent block tables and the host and device buffers of one executor. The buffers grow
    (doubling) when a step needs more room, so after the first steps of each size no step allocates.
    On CUDA two pinned host buffers take turns: a step fills one while the copy of the step before
    may still be reading the other."""

    def __init__(self, block_size: int, device: torch.device, capacity: int = 1 << 14):
        self.block_size = block_size
        self.device = device
        self.block_tables = BlockTables()
        self._on_cuda = device.type == "cuda"
        self._hosts = [self._host_buffer(capacity) for _ in range(2 if self._on_cuda else 1)]
        # a host buffer may only be refilled once the copy that last read it is done
        self._copied = [torch.cuda.Event() for _ in self._hosts] if self._on_cuda else []
        self._device_buf = torch.empty(capacity, dtype=torch.int32, device=device) if self._on_cuda else None
        self._turn = 0
        # the last step's packed buffer (on the device) and its layout: what rank 0 of a tensor-
        # parallel group broadcasts
        self.packed: torch.Tensor | None = None
        self.layout: StepLayout | None = None
        # the last step's layout and its views: a steady decode keeps its layout for block_size steps,
        # and building the views costs more than filling them. The buffer under them is replaced only
        # when a step outgrows it, which a step of the same layout cannot
        self._views: tuple[StepLayout, tuple[ModelInput, torch.Tensor, torch.Tensor]] | None = None

    def _host_buffer(self, capacity: int) -> torch.Tensor:
        return torch.empty(capacity, dtype=torch.int32, pin_memory=self._on_cuda)

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        seqs = batch.seqs
        n, bs, num_steps = len(seqs), self.block_size, batch.num_steps
        rows, num_blocks = self.block_tables.rows(seqs)
        num_computed = np.array([s.num_computed for s in seqs], dtype=np.int64)
        num_new = np.array([s.num_new for s in seqs], dtype=np.int64)
        query_start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(num_new, out=query_start[1:])
        if query_start[-1] == n:  # one new token each: decodes, mostly
            input_ids = [s.token_ids[s.num_computed] for s in seqs]
            positions, token_rows = num_computed, rows
        else:
            input_ids = [t for s in seqs for t in s.token_ids[s.num_computed : s.seq_len]]
            seq_index = np.repeat(np.arange(n), num_new)
            positions = np.arange(len(input_ids)) + (num_computed - query_start[:-1])[seq_index]
            token_rows = rows[seq_index]
        sample = [s.sample for s in seqs]
        sample_rows = query_start[1:] - 1 if all(sample) else query_start[1:][sample] - 1
        seq_lens = num_computed + num_new
        if num_steps > 1:
            # decodes only: forward k runs each sequence k positions on, except that one reaching
            # max_tokens inside the window repeats its last output's slot (those tokens are dropped)
            # instead of running past its reserved blocks
            last = np.array([s.seq_len - s.num_outputs + s.sampling.max_tokens - 1 for s in seqs])
            positions = np.minimum(positions + np.arange(num_steps)[:, None], last)
            seq_lens = positions + 1
        table = self.block_tables.table
        slots = table[token_rows, positions // bs] * bs + positions % bs
        num_tokens, num_feed = len(input_ids), len(batch.feed_rows)
        layout = StepLayout(
            n, num_tokens, num_steps, int(num_blocks.max()), len(sample_rows), num_feed, batch.is_decode_only
        )
        sizes, starts = layout.sections()
        host = self._host(starts[-1]).numpy()
        ids_h, positions_h, seq_lens_h, query_start_h, sample_rows_h, tables_h, slots_h, rows_h, cols_h = (
            host[start : start + size] for start, size in zip(starts, sizes, strict=False)
        )
        row_t, row_n, width = _padded(num_tokens), _padded(n), layout.width
        ids_h[:] = input_ids
        positions_h.reshape(num_steps, row_t)[:, :num_tokens] = positions
        seq_lens_h.reshape(num_steps, row_n)[:, :n] = seq_lens
        query_start_h[:] = query_start
        sample_rows_h[:] = sample_rows
        np.take(self.block_tables.table[:, :width], rows, axis=0, out=tables_h.reshape(n, width))
        slots_h.view(np.int64).reshape(num_steps, row_t)[:, :num_tokens] = slots
        if num_feed:
            rows_h[:], cols_h[:] = batch.feed_rows, batch.feed_cols
        self.packed = self._send(starts[-1])
        self.layout = layout
        if self._views is None or self._views[0] != layout:
            self._views = (layout, unpack(self.packed, layout))
        inputs, feed_rows, feed_cols = self._views[1]
        if num_steps == 1:
            inputs.host_lens = (query_start, seq_lens)
        if num_feed:
            # overlapped steps: decodes whose input token was still unknown at scheduling take it from
            # the step in flight's sampled tokens, on the device, without a host round trip
            inputs.input_ids[feed_rows] = batch.feed_tokens[-1, feed_cols].to(inputs.input_ids.dtype)
        return inputs

    def _host(self, size: int) -> torch.Tensor:
        """This step's host buffer, free to fill and holding at least size entries."""
        self._turn = (self._turn + 1) % len(self._hosts)
        if self._copied:
            self._copied[self._turn].synchronize()
        host = self._hosts[self._turn]
        if size > host.numel():
            host = self._hosts[self._turn] = self._host_buffer(max(size, 2 * host.numel()))
        return host

    def _send(self, total: int) -> torch.Tensor:
        host = self._hosts[self._turn][:total]
        if not self._on_cuda:
            return host  # the CPU computes straight from the host buffer
        if total > self._device_buf.numel():
            self._device_buf = torch.empty(
                max(total, 2 * self._device_buf.numel()), dtype=torch.int32, device=self.device
            )
        device = self._device_buf[:total]
        device.copy_(host, non_blocking=True)
        self._copied[self._turn].record()
        return device


def prepare_inputs(batch: ScheduledBatch, block_size: int, device: torch.device) -> ModelInput:
    """One step's inputs through throwaway buffers (tests and one-off forwards)."""
    return InputBuffers(block_size, device, capacity=1).prepare(batch)
