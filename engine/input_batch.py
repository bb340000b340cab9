"""Turn a ScheduledBatch into the model's tensors: flattened token ids and positions, where each new
token's K/V goes (slot mapping), and each sequence's block table, length and row range; for a
multi-step window, the positions, slots and lengths of every forward.

Runs every step with up to max_num_seqs sequences, so it touches each sequence a few times in list
comprehensions and does the rest in numpy, never a Python loop over tokens or blocks. Block tables
persist across steps (engine/block_tables.py). All integer inputs of a step are
packed into one host buffer (pinned on CUDA) and sent in a single non-blocking copy to one device
buffer; the model's inputs are views of it. On the CPU the host buffer is the device buffer."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from engine.batch import ScheduledBatch
from engine.block_tables import BlockTables
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
    # equal for two steps whose block tables are equal (BlockTables.version); None: unknown
    tables_version: int | None = None

    def next_forward(self, step: int, sampled: torch.Tensor) -> ModelInput:
        """Forward `step` (>= 1) of a multi-step window: its input tokens are those just sampled."""
        positions, attn = self.later[step - 1]
        return ModelInput(sampled, positions, attn, self.sample_rows, tables_version=self.tables_version)


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

    def sections(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Each section's size and start, in int32 entries; the last start is the buffer's size. Each
        section starts on a 16-byte boundary, and so does each forward's row of a window (Triton
        specializes kernels on pointer alignment: an unaligned view would compile a second variant of
        a kernel mid-run, ~0.7 s on an H200, when the batch's shape shifts the sections)."""
        return _sections(self)


@functools.lru_cache(maxsize=256)  # a steady decode asks for the same layout's every step
def _sections(layout: StepLayout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n, t, k = layout.num_seqs, layout.num_tokens, layout.num_steps
    sizes = (t, k * _padded(t), k * _padded(n), n + 1, layout.num_sample, n * layout.width)
    sizes += (2 * k * _padded(t), layout.num_feed, layout.num_feed)
    return sizes, tuple(itertools.accumulate((_padded(size) for size in sizes), initial=0))


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
        self._stream = torch.cuda.current_stream(device) if self._on_cuda else None  # as TokenReadback
        self._device_buf = torch.empty(capacity, dtype=torch.int32, device=device) if self._on_cuda else None
        self._turn = 0
        # the last step's packed buffer (on the device) and its layout: what rank 0 of a tensor-
        # parallel group broadcasts
        self.packed: torch.Tensor | None = None
        self.layout: StepLayout | None = None
        # the last step's layout with its views: of each host buffer (the sections to fill) and of the
        # device buffer (the model inputs). The buffer under the views is replaced only when a step
        # outgrows it, which a step of the same layout cannot
        self._host_views: list[tuple | None] = [None] * len(self._hosts)
        self._views: tuple | None = None
        self._range = np.arange(0)

    def _host_buffer(self, capacity: int) -> torch.Tensor:
        return torch.empty(capacity, dtype=torch.int32, pin_memory=self._on_cuda)

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        seqs = batch.seqs
        n, bs, num_steps = len(seqs), self.block_size, batch.num_steps
        rows, longest = self.block_tables.rows(seqs)
        num_computed = np.array([s.num_computed for s in seqs], dtype=np.int64)
        num_new = [s.num_new for s in seqs]
        sample = [s.sample for s in seqs]
        every_row_sampled = all(sample)
        if sum(num_new) == n:  # one new token each: decodes, mostly
            input_ids = [s.token_ids[s.num_computed] for s in seqs]
            positions, token_rows, seq_lens = num_computed, rows, num_computed + 1
            query_start = self._arange(n + 1)
            sample_rows = query_start[:-1] if every_row_sampled else np.flatnonzero(sample)
            decode_only = every_row_sampled and all([s.num_outputs for s in seqs])
        else:
            query_start = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(num_new, out=query_start[1:])
            input_ids = [t for s in seqs for t in s.token_ids[s.num_computed : s.seq_len]]
            seq_index = np.repeat(np.arange(n), num_new)
            positions = np.arange(len(input_ids)) + (num_computed - query_start[:-1])[seq_index]
            token_rows = rows[seq_index]
            sample_rows = query_start[1:] - 1 if every_row_sampled else query_start[1:][sample] - 1
            seq_lens = query_start[1:] - query_start[:-1] + num_computed
            decode_only = False
        if num_steps > 1:
            # decodes only: forward k runs each sequence k positions on, except that one reaching
            # max_tokens inside the window repeats its last output's slot (those tokens are dropped)
            # instead of running past its reserved blocks
            last = np.array([s.seq_len - s.num_outputs + s.sampling.max_tokens - 1 for s in seqs])
            positions = np.minimum(positions + np.arange(num_steps)[:, None], last)
            seq_lens = positions + 1
        table = self.block_tables.table
        block_index, offset = np.divmod(positions, bs)
        slots = table[token_rows, block_index] * bs + offset
        num_tokens, num_feed = len(input_ids), len(batch.feed_rows)
        layout = StepLayout(n, num_tokens, num_steps, longest, len(sample_rows), num_feed, decode_only)
        host, views = self._fill_views(layout)
        ids_h, positions_h, seq_lens_h, query_start_h, sample_rows_h, tables_h, slots_h, rows_h, cols_h = host
        ids_h[:] = input_ids
        positions_h[:] = positions
        seq_lens_h[:] = seq_lens
        query_start_h[:] = query_start
        sample_rows_h[:] = sample_rows
        np.take(table[:, : layout.width], rows, axis=0, out=tables_h)
        slots_h[:] = slots
        if num_feed:
            rows_h[:], cols_h[:] = batch.feed_rows, batch.feed_cols
        self._send()
        self.layout = layout
        inputs, feed_rows, feed_cols = views
        inputs.tables_version = self.block_tables.version
        if num_steps == 1:
            inputs.host_lens = (query_start, seq_lens)
        if num_feed:
            # overlapped steps: decodes whose input token was still unknown at scheduling take it from
            # the step in flight's sampled tokens, on the device, without a host round trip
            inputs.input_ids[feed_rows] = batch.feed_tokens[-1, feed_cols].to(inputs.input_ids.dtype)
        return inputs

    def _arange(self, size: int) -> np.ndarray:
        if self._range.size < size:
            self._range = np.arange(max(size, 2 * self._range.size))
        return self._range[:size]

    def _fill_views(self, layout: StepLayout) -> tuple[list[np.ndarray], tuple]:
        """This step's host buffer, as one array per section shaped as the step writes it, and the
        model inputs as views of the device buffer it is sent to. A steady decode keeps its layout for
        block_size steps: both sets of views are then the last ones, since building them costs more
        than filling them."""
        sizes, starts = layout.sections()
        total = starts[-1]
        host = self._host(total)
        if self._on_cuda and total > self._device_buf.numel():
            self._device_buf = torch.empty(
                max(total, 2 * self._device_buf.numel()), dtype=torch.int32, device=self.device
            )
        cached = self._host_views[self._turn]
        if cached is None or cached[0] != layout or cached[1] is not host:
            h = host.numpy()
            n, t, k = layout.num_seqs, layout.num_tokens, layout.num_steps
            ids, positions, seq_lens, query_start, sample_rows, tables, slots, rows, cols = (
                h[start : start + size] for start, size in zip(starts, sizes, strict=False)
            )
            row_t, row_n = _padded(t), _padded(n)
            sections = [ids, positions.reshape(k, row_t)[:, :t], seq_lens.reshape(k, row_n)[:, :n]]
            sections += [query_start, sample_rows, tables.reshape(n, layout.width)]
            sections += [slots.view(np.int64).reshape(k, row_t)[:, :t], rows, cols]
            if k == 1:  # written from 1D arrays
                sections[1], sections[2], sections[6] = sections[1][0], sections[2][0], sections[6][0]
            cached = self._host_views[self._turn] = (layout, host, sections, host[:total])
        under = self._device_buf if self._on_cuda else host
        if self._views is None or self._views[0] != layout or self._views[1] is not under:
            device = self._device_buf[:total] if self._on_cuda else cached[3]
            self._views = (layout, under, device, unpack(device, layout))
        return cached[2], self._views[3]

    def _host(self, size: int) -> torch.Tensor:
        """This step's host buffer, free to fill and holding at least size entries."""
        self._turn = (self._turn + 1) % len(self._hosts)
        if self._copied:
            self._copied[self._turn].synchronize()
        host = self._hosts[self._turn]
        if size > host.numel():
            host = self._hosts[self._turn] = self._host_buffer(max(size, 2 * host.numel()))
        return host

    def _send(self) -> None:
        """The host buffer just filled to the device: one non-blocking copy, from pinned memory."""
        self.packed = self._views[2]
        if self._on_cuda:
            self.packed.copy_(self._host_views[self._turn][3], non_blocking=True)
            self._copied[self._turn].record(self._stream)


def prepare_inputs(batch: ScheduledBatch, block_size: int, device: torch.device) -> ModelInput:
    """One step's inputs through throwaway buffers (tests and one-off forwards)."""
    return InputBuffers(block_size, device, capacity=1).prepare(batch)
