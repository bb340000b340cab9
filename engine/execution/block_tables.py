"""Block tables that persist across steps (vLLM V1's persistent batch): each table gets a row of a host
array when first seen, and later steps write only the blocks appended to it since. A steady decode
batch holds the same tables step after step, and gains a block in one of every block_size steps.

The per-step bookkeeping is in Python's builtins on lists, not numpy: on a host whose caches a
forward's wait has left cold, a numpy call on a few hundred ints costs 15-35 us, a builtin's pass over
them 7-17 (docs/measurements/cpu/lean_decode_inputs/call_costs.json)."""

from __future__ import annotations

import itertools

import numpy as np
from llmbench.engine.scheduling.batch import ScheduledSeq

_versions = itertools.count(1)  # shared by every instance, so two never hand out the same version


class BlockTables:
    """Every block table seen lately, one row each of a host array. A table is keyed by the list
    object itself, which a sequence only ever appends to (freeing its blocks gives it a new list), so
    a row stays valid and a step copies only the blocks appended since the last one. Rows of tables
    no batch holds any more are reused once the array is full."""

    def __init__(self, rows: int = 64, width: int = 64):
        self.table = np.zeros((rows, width), dtype=np.int32)
        self._row_of: dict[int, int] = {}  # id(block table list) -> row
        self._lists: list[list[int] | None] = [None] * rows  # holding each list keeps its id unique
        self._filled = [0] * rows  # blocks of the list already in the row
        self._free = list(range(rows - 1, -1, -1))
        # the last batch's tables, their rows and lengths: the next batch of the same tables skips
        # finding its rows
        self._last: tuple[list[list[int]], np.ndarray, list[int]] = ([], np.zeros(0, np.int64), [])
        # changes whenever a batch's tables differ from the last batch's, in order or in content: a
        # CUDA graph's static copy of them is still right while it holds
        self.version = next(_versions)

    def rows(self, seqs: list[ScheduledSeq]) -> tuple[np.ndarray, int]:
        """The row of each sequence's table, brought up to date, and the longest table's length. When the
        batch holds the same tables as the last one (a steady decode) their rows are known; only the
        tables that grew are written (a decode gains a block every block_size steps)."""
        tables = [s.block_table for s in seqs]
        lengths = list(map(len, tables))
        # the same list objects in a steady decode, compared without a call; equal lists that are not
        # the same (a table freed and refilled with the same blocks) hold what the rows hold too
        if tables == self._last[0]:
            _, rows_np, filled = self._last
            rows = None
        else:
            self.version = next(_versions)
            rows = list(map(self._row_of.get, map(id, tables)))
            if None in rows:
                self._add(tables, rows)
            rows_np = np.fromiter(rows, np.int64, len(rows))
            filled = list(map(self._filled.__getitem__, rows))
        longest = max(lengths)
        if longest > self.table.shape[1]:
            self._widen(longest)
        if lengths != filled:
            self.version = next(_versions)
            if rows is None:
                rows = rows_np.tolist()
            for i, (length, start) in enumerate(zip(lengths, filled, strict=True)):
                if length != start:
                    self.table[rows[i], start:length] = tables[i][start:]
                    self._filled[rows[i]] = length
        self._last = (tables, rows_np, lengths)
        return rows_np, longest

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
            self._lists += [None] * old
            self._filled += [0] * old
            self._free += range(2 * old - 1, old - 1, -1)

    def _widen(self, width: int) -> None:
        grown = np.zeros((self.table.shape[0], max(width, 2 * self.table.shape[1])), dtype=np.int32)
        grown[:, : self.table.shape[1]] = self.table
        self.table = grown
