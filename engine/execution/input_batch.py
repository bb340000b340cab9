"""Turn a ScheduledBatch into the model's tensors: flattened token ids and positions, where each new
token's K/V goes (slot mapping), and each sequence's block table, length and row range; for a
multi-step window, the positions, slots and lengths of every forward.

Runs every step with up to max_num_seqs sequences, so it touches each sequence a few times in list
comprehensions and does the rest in numpy, never a Python loop over tokens or blocks. A single step of
decodes, most steps of a load, is computed in list comprehensions alone and written in few numpy
calls, which cost more than the work on a host whose caches the forward's wait left cold. Block tables
persist across steps (engine/execution/block_tables.py). All integer inputs of a step are packed into one host
buffer (pinned on CUDA, laid out by engine/execution/step_layout.py) and sent in a single non-blocking copy to
one device buffer; the model's inputs are views of it. On the CPU the host buffer is the device
buffer."""

from __future__ import annotations

import numpy as np
import torch
from llmbench.engine.execution.block_tables import BlockTables
from llmbench.engine.execution.step_layout import ModelInput, StepLayout, padded, unpack
from llmbench.engine.scheduling.batch import ScheduledBatch


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
        # the block tables version each host buffer's tables section holds (None: unknown)
        self._tables_written: list[int | None] = [None] * len(self._hosts)
        self._views: tuple | None = None
        self._range = np.arange(0)

    def _host_buffer(self, capacity: int) -> torch.Tensor:
        return torch.empty(capacity, dtype=torch.int32, pin_memory=self._on_cuda)

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        seqs = batch.seqs
        n, bs, num_steps = len(seqs), self.block_size, batch.num_steps
        rows, longest = self.block_tables.rows(seqs)
        num_computed = [s.num_computed for s in seqs]
        if num_steps == 1 and batch.is_decode_only:
            return self._prepare_decodes(batch, rows, longest, num_computed)
        num_computed = np.array(num_computed, dtype=np.int64)
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
        host, views, _ = self._fill_views(layout)
        ids_h, positions_h, seq_lens_h, query_start_h, sample_rows_h, tables_h, slots_h, rows_h, cols_h = (
            host[:9]
        )
        ids_h[:] = input_ids
        positions_h[:] = positions
        seq_lens_h[:] = seq_lens
        query_start_h[:] = query_start
        sample_rows_h[:] = sample_rows
        self._write_tables(tables_h, rows, layout.width)
        slots_h[:] = slots
        if num_feed:
            rows_h[:], cols_h[:] = batch.feed_rows, batch.feed_cols
        return self._finish(layout, views, batch, (query_start, seq_lens) if num_steps == 1 else None)

    def _finish(
        self, layout: StepLayout, views: tuple, batch: ScheduledBatch, host_lens: tuple | None = None
    ) -> ModelInput:
        """The filled host buffer sent; the model inputs, as views of where it goes (with host_lens,
        the row offsets and lengths of a single step, as ModelInput.host_lens)."""
        self._send()
        self.layout = layout
        inputs, feed_rows, feed_cols = views
        inputs.tables_version = self.block_tables.version
        inputs.host_lens = host_lens
        if layout.num_feed:
            # overlapped steps: decodes whose input token was still unknown at scheduling take it from
            # the step in flight's sampled tokens, on the device, without a host round trip
            inputs.input_ids[feed_rows] = batch.feed_tokens[-1, feed_cols].to(inputs.input_ids.dtype)
        return inputs

    def _prepare_decodes(
        self, batch: ScheduledBatch, rows: np.ndarray, longest: int, num_computed: list[int]
    ) -> ModelInput:
        """A single step of sampled decodes, as most steps of a load are. Its values are computed in
        list comprehensions and written in three numpy calls (ids, positions and lengths in one, then
        the slots, then the tables when this host buffer's copy of them is stale): on a host whose
        caches a forward's wait left cold, each numpy call costs more than the work it does."""
        seqs, bs = batch.seqs, self.block_size
        n, num_feed = len(seqs), len(batch.feed_rows)
        layout = StepLayout(n, n, 1, longest, n, num_feed, True)
        host, views, fresh = self._fill_views(layout)
        _, _, _, query_start_h, sample_rows_h, tables_h, slots_h, rows_h, cols_h, decode_rows_h = host
        ids = [s.token_ids[c] for s, c in zip(seqs, num_computed, strict=True)]
        decode_rows_h[:] = (ids, num_computed, [c + 1 for c in num_computed])  # ids, positions, lengths
        slots_h[:] = [s.block_table[c // bs] * bs + c % bs for s, c in zip(seqs, num_computed, strict=True)]
        if fresh:  # a decode layout's row offsets and sampled rows never change while the views hold
            query_start_h[:] = self._arange(n + 1)
            sample_rows_h[:] = query_start_h[:-1]
        self._write_tables(tables_h, rows, longest)
        if num_feed:
            rows_h[:], cols_h[:] = batch.feed_rows, batch.feed_cols
        return self._finish(layout, views, batch)

    def _write_tables(self, tables_h: np.ndarray, rows: np.ndarray, width: int) -> None:
        """This host buffer's block tables section, unless it holds these tables already: a steady
        decode's change once every block_size steps."""
        version = self.block_tables.version
        if self._tables_written[self._turn] != version:
            np.take(self.block_tables.table[:, :width], rows, axis=0, out=tables_h)
            self._tables_written[self._turn] = version

    def _arange(self, size: int) -> np.ndarray:
        if self._range.size < size:
            self._range = np.arange(max(size, 2 * self._range.size))
        return self._range[:size]

    def _fill_views(self, layout: StepLayout) -> tuple[list[np.ndarray | None], tuple, bool]:
        """This step's host buffer, as one array per section shaped as the step writes it (then, for a
        single step of one token a sequence, the first three sections as one [3, n] array), the model
        inputs as views of the device buffer it is sent to, and whether the host views are new (the
        buffer then holds nothing of this layout). A steady decode keeps its layout for block_size
        steps: both sets of views are then the last ones, since building them costs more than filling
        them."""
        sizes, starts = layout.sections()
        total = starts[-1]
        host = self._host(total)
        if self._on_cuda and total > self._device_buf.numel():
            self._device_buf = torch.empty(
                max(total, 2 * self._device_buf.numel()), dtype=torch.int32, device=self.device
            )
        cached = self._host_views[self._turn]
        fresh = False
        if cached is None or cached[0] != layout or cached[1] is not host:
            h = host.numpy()
            n, t, k = layout.num_seqs, layout.num_tokens, layout.num_steps
            ids, positions, seq_lens, query_start, sample_rows, tables, slots, rows, cols = (
                h[start : start + size] for start, size in zip(starts, sizes, strict=False)
            )
            row_t, row_n = padded(t), padded(n)
            sections = [ids, positions.reshape(k, row_t)[:, :t], seq_lens.reshape(k, row_n)[:, :n]]
            sections += [query_start, sample_rows, tables.reshape(n, layout.width)]
            sections += [slots.view(np.int64).reshape(k, row_t)[:, :t], rows, cols]
            if k == 1:  # written from 1D arrays
                sections[1], sections[2], sections[6] = sections[1][0], sections[2][0], sections[6][0]
            sections.append(h[: starts[3]].reshape(3, row_n)[:, :n] if k == 1 and t == n else None)
            cached = self._host_views[self._turn] = (layout, host, sections, host[:total])
            self._tables_written[self._turn] = None
            fresh = True
        under = self._device_buf if self._on_cuda else host
        if self._views is None or self._views[0] != layout or self._views[1] is not under:
            device = self._device_buf[:total] if self._on_cuda else cached[3]
            self._views = (layout, under, device, unpack(device, layout))
        return cached[2], self._views[3], fresh

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
