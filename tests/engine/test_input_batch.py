"""The packed step inputs: right values, and every view 16-byte aligned whatever the batch's shape."""

import itertools
import random

import pytest
import torch
from llmbench.engine.execution.block_tables import BlockTables
from llmbench.engine.execution.input_batch import InputBuffers
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq

from tests.engine.device_ops import DeviceOps

BLOCK = 4


def mixed_batch(num_seqs: int, seed: int) -> ScheduledBatch:
    """Chunks of odd lengths at odd offsets, so the sections' natural boundaries fall anywhere."""
    rng = random.Random(seed)
    seqs = []
    for i in range(num_seqs):
        length = rng.randrange(1, 23)
        done = rng.randrange(0, length)
        table = [rng.randrange(0, 100) for _ in range(-(-length // BLOCK))]
        tokens = [rng.randrange(3, 500) for _ in range(length)]
        seqs.append(
            ScheduledSeq(i, tokens, done, length - done, table, SamplingParams(), sample=rng.random() < 0.7)
        )
    return ScheduledBatch(seqs)


@pytest.mark.parametrize("seed", range(6))
def test_views_are_aligned_and_hold_the_batch(seed):
    buffers = InputBuffers(BLOCK, torch.device("cpu"), capacity=8)
    for num_seqs in (1, 3, 5, 6, 7):
        batch = mixed_batch(num_seqs, seed * 10 + num_seqs)
        inputs = buffers.prepare(batch)
        attn = inputs.attn
        views = (inputs.input_ids, inputs.positions, attn.seq_lens, attn.query_start_loc, attn.block_tables)
        assert all(v.data_ptr() % 16 == 0 for v in views), [v.data_ptr() % 16 for v in views]
        seqs = batch.seqs
        assert inputs.input_ids.tolist() == [t for s in seqs for t in s.token_ids[s.num_computed :]]
        assert inputs.positions.tolist() == [p for s in seqs for p in range(s.num_computed, len(s.token_ids))]
        assert attn.seq_lens.tolist() == [len(s.token_ids) for s in seqs]
        ends = torch.tensor([s.num_new for s in seqs]).cumsum(0).tolist()
        assert attn.query_start_loc.tolist() == [0, *ends]
        assert inputs.sample_rows.tolist() == [end - 1 for s, end in zip(seqs, ends, strict=True) if s.sample]
        width = max(len(s.block_table) for s in seqs)
        assert attn.block_tables.tolist() == [
            s.block_table + [0] * (width - len(s.block_table)) for s in seqs
        ]


def decode_batch(num_seqs: int, token: int) -> ScheduledBatch:
    """num_seqs sequences of 5 tokens (the last one `token + i`) each decoding one."""
    return ScheduledBatch(
        [
            ScheduledSeq(i, [1, 2, 3, 4, token + i], 4, 1, [i, i + 1], SamplingParams(), sample=True)
            for i in range(num_seqs)
        ]
    )


def test_a_steady_decode_reuses_its_views_and_a_regrown_buffer_gets_new_ones():
    buffers = InputBuffers(BLOCK, torch.device("cpu"), capacity=8)
    first = buffers.prepare(decode_batch(3, 100))
    again = buffers.prepare(decode_batch(3, 200))  # same layout, same buffer: the same views, new values
    assert again.input_ids is first.input_ids and again.input_ids.tolist() == [200, 201, 202]
    buffers.prepare(decode_batch(40, 300))  # past the capacity: the buffer is replaced
    after = buffers.prepare(decode_batch(3, 400))  # the first layout again, in the new buffer
    assert after.input_ids is not first.input_ids and after.input_ids.tolist() == [400, 401, 402]
    assert after.attn.block_tables.tolist() == [[0, 1], [1, 2], [2, 3]]
    assert after.attn.seq_lens.tolist() == [5, 5, 5]


def expected_inputs(batch: ScheduledBatch) -> dict:
    """The step's inputs written out token by token: what the vectorised packing must equal."""
    seqs, steps = batch.seqs, batch.num_steps
    positions, slots, seq_lens = [], [], []
    for step in range(steps):
        row_positions = []
        for s in seqs:
            last = s.seq_len - s.num_outputs + s.sampling.max_tokens - 1 if steps > 1 else s.seq_len
            row_positions += [min(p + step, last) for p in range(s.num_computed, s.seq_len)]
        positions.append(row_positions)
        token_seqs = [s for s in seqs for _ in range(s.num_new)]
        slots.append(
            [
                s.block_table[p // BLOCK] * BLOCK + p % BLOCK
                for s, p in zip(token_seqs, row_positions, strict=True)
            ]
        )
        seq_lens.append([p + 1 for p in row_positions] if steps > 1 else [s.seq_len for s in seqs])
    width = max(len(s.block_table) for s in seqs)
    ends = list(itertools.accumulate(s.num_new for s in seqs))
    return {
        "input_ids": [t for s in seqs for t in s.token_ids[s.num_computed : s.seq_len]],
        "positions": positions,
        "slots": slots,
        "seq_lens": seq_lens,
        "block_tables": [s.block_table + [0] * (width - len(s.block_table)) for s in seqs],
        "query_start": [0, *ends],
        "sample_rows": [end - 1 for s, end in zip(seqs, ends, strict=True) if s.sample],
    }


def packed_inputs(inputs) -> dict:
    forwards = [(inputs.positions, inputs.attn)] + inputs.later
    return {
        "input_ids": inputs.input_ids.tolist(),
        "positions": [p.tolist() for p, _ in forwards],
        "slots": [a.slot_mapping.tolist() for _, a in forwards],
        "seq_lens": [a.seq_lens.tolist() for _, a in forwards],
        "block_tables": inputs.attn.block_tables.tolist(),
        "query_start": inputs.attn.query_start_loc.tolist(),
        "sample_rows": inputs.sample_rows.tolist(),
    }


class Tables:
    """Block tables living as the block manager keeps them: grown by appending, replaced by a new
    list when a sequence is preempted."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.next_block = 0

    def fresh(self, num_blocks: int) -> list[int]:
        blocks = list(range(self.next_block, self.next_block + num_blocks))
        self.next_block += num_blocks
        self.rng.shuffle(blocks)
        return blocks


@pytest.mark.parametrize("seed", range(4))
def test_persistent_block_tables_follow_growth_preemption_reordering_and_turnover(seed):
    """Sequences come and go over many steps (more tables than the persistent array has rows), grow
    past its width, change order, get preempted (a new table) and run chunks or decodes, the steps of
    decodes alone through their own path: each step's packed inputs equal the ones written out from
    scratch."""
    rng = random.Random(seed)
    tables = Tables(rng)
    buffers = InputBuffers(BLOCK, torch.device("cpu"), capacity=8)
    buffers.block_tables = BlockTables(rows=4, width=2)  # small, so it reuses rows and grows
    live: dict[int, list] = {}  # seq_id -> [tokens, num_computed, block_table]
    next_id = decode_steps = 0
    for _ in range(120):
        while len(live) < rng.randrange(1, 12):
            tokens = [rng.randrange(3, 500) for _ in range(rng.randrange(1, 30))]
            live[next_id] = [tokens, 0, tables.fresh(-(-len(tokens) // BLOCK))]
            next_id += 1
        for seq_id in rng.sample(sorted(live), k=rng.randrange(0, 3)):
            if rng.random() < 0.5:
                del live[seq_id]  # finished
            else:
                tokens, _, table = live[seq_id]  # preempted: recomputed into fresh blocks
                live[seq_id] = [tokens, 0, tables.fresh(len(table))]
        order = sorted(live)
        if rng.random() < 0.3:
            rng.shuffle(order)
        seqs = []
        for seq_id in order:
            tokens, done, table = live[seq_id]
            num_new = len(tokens) - done
            num_outputs = 1 if num_new == 1 and done else 0  # a decode after its first output
            seqs.append(
                ScheduledSeq(seq_id, tokens, done, num_new, table, SamplingParams(), True, num_outputs)
            )
        if not seqs:
            continue
        batch = ScheduledBatch(seqs)
        inputs = buffers.prepare(batch)
        assert packed_inputs(inputs) == expected_inputs(batch)
        decode_steps += inputs.attn.decode_only
        for seq_id in order:  # every sequence decodes on: one more token, a block when it fills one
            tokens, _, table = live[seq_id]
            live[seq_id][1] = len(tokens)
            tokens.append(rng.randrange(3, 500))
            if len(tokens) > len(table) * BLOCK:
                table += tables.fresh(1)
    rows, width = buffers.block_tables.table.shape
    assert rows > 4 and width > 2
    assert 20 < decode_steps < 100  # both paths taken, often


@pytest.mark.parametrize("seed", range(3))
def test_a_steady_batch_keeps_its_rows_and_each_row_equals_its_table(seed):
    """The same tables step after step (a steady decode) keep their rows; tables grow at random, and
    one is sometimes replaced by a new list of the same blocks (freed, then refilled): every row
    read back equals its table, as a build from scratch gives."""
    rng = random.Random(seed)
    block_tables = BlockTables(rows=4, width=2)
    lists = [[rng.randrange(0, 1000)] for _ in range(6)]
    seqs = [ScheduledSeq(i, [1], 0, 1, table, SamplingParams(), sample=True) for i, table in enumerate(lists)]
    first_rows, _ = block_tables.rows(seqs)
    for _ in range(60):
        for s in seqs:
            if rng.random() < 0.2:
                s.block_table.append(rng.randrange(0, 1000))
        if rng.random() < 0.2:
            s = rng.choice(seqs)
            s.block_table = list(s.block_table)  # equal blocks, another list
        rows, longest = block_tables.rows(seqs)
        lengths = [len(s.block_table) for s in seqs]
        assert longest == max(lengths)
        assert [block_tables.table[r, :n].tolist() for r, n in zip(rows, lengths, strict=True)] == [
            s.block_table for s in seqs
        ]
        fresh = BlockTables(rows=4, width=2)
        fresh_rows, _ = fresh.rows(seqs)
        assert (fresh.table[fresh_rows, :longest] == block_tables.table[rows, :longest]).all()
        assert rows.tolist() == first_rows.tolist()


@pytest.mark.parametrize("num_steps", [1, 4])
def test_a_multi_step_window_is_built_on_the_host_and_stops_at_each_last_output(num_steps):
    """Every forward's positions, slots and lengths come with the first forward's; a sequence whose
    max_tokens ends inside the window repeats its last output's position."""
    tables = [[7, 3, 11, 2], [9, 4, 1, 8], [5, 6, 10, 0]]
    left = [
        (SamplingParams(max_tokens=30), 2),
        (SamplingParams(max_tokens=3), 1),  # two outputs left: the fourth forward repeats the third's
        (SamplingParams(max_tokens=9), 8),  # one left: its position, 12, from the second forward on
    ]
    seqs = [
        ScheduledSeq(i, [5] * (10 + i), 9 + i, 1, tables[i], params, True, num_outputs)
        for i, (params, num_outputs) in enumerate(left)
    ]
    batch = ScheduledBatch(seqs, num_steps=num_steps)
    inputs = InputBuffers(BLOCK, torch.device("cpu")).prepare(batch)
    assert len(inputs.later) == num_steps - 1
    # three rows: each forward's row of the window starts on a 16-byte boundary all the same
    views = [t for positions, attn in inputs.later for t in (positions, attn.slot_mapping, attn.seq_lens)]
    assert all(v.data_ptr() % 16 == 0 for v in views), [v.data_ptr() % 16 for v in views]
    assert packed_inputs(inputs) == expected_inputs(batch)
    if num_steps > 1:
        assert packed_inputs(inputs)["positions"] == [[9, 10, 11], [10, 11, 12], [11, 12, 12], [12, 12, 12]]
        sampled = torch.tensor([40, 41, 42])
        later = inputs.next_forward(2, sampled)
        assert later.input_ids is sampled and later.positions.tolist() == [11, 12, 12]


def test_fed_decodes_take_their_input_token_from_the_step_in_flight():
    """Async output: the rows named by feed_rows get column feed_cols of the in-flight tokens' last row."""
    seqs = [ScheduledSeq(i, [5, 6, 0], 2, 1, [i], SamplingParams(), True, 1) for i in range(3)]
    batch = ScheduledBatch(seqs, feed_rows=[0, 2], feed_cols=[1, 0], feed_tokens=torch.tensor([[70, 71, 72]]))
    inputs = InputBuffers(BLOCK, torch.device("cpu")).prepare(batch)
    assert inputs.input_ids.tolist() == [71, 0, 70]


@pytest.mark.gpu
@pytest.mark.parametrize("num_steps", [1, 4])
def test_on_cuda_one_copy_carries_the_step_and_it_holds_what_the_cpu_builds(num_steps):
    buffers = InputBuffers(BLOCK, torch.device("cuda"))
    for seed in range(3):  # both pinned buffers, each reused
        if num_steps == 1:
            batch = mixed_batch(7, seed)
        else:
            seqs = [
                ScheduledSeq(
                    i, [5] * (9 + i), 8 + i, 1, [i, 9, 20 + i, 30], SamplingParams(max_tokens=9), True, 2
                )
                for i in range(5)
            ]
            batch = ScheduledBatch(seqs, num_steps=num_steps)
        with DeviceOps() as device:
            inputs = buffers.prepare(batch)
        assert device.ops == ["copy_"]
        assert packed_inputs(inputs) == packed_inputs(InputBuffers(BLOCK, torch.device("cpu")).prepare(batch))
        assert inputs.input_ids.is_cuda and inputs.attn.slot_mapping.dtype == torch.int64


@pytest.mark.gpu
def test_on_cuda_steady_decodes_find_current_tables_in_either_pinned_buffer():
    """Two pinned buffers take turns, and each rewrites its block tables only when they changed since
    it last held them: as tables grow, one by one or all at once, every step holds what the CPU builds."""
    rng = random.Random(0)
    buffers = InputBuffers(BLOCK, torch.device("cuda"))
    # staggered lengths: some steps grow one table, some none, some two
    seqs = [
        ScheduledSeq(
            i, [5] * (9 + i), 8 + i, 1, [100 * i + b for b in range(3 + i // 4)], SamplingParams(), True, 1
        )
        for i in range(6)
    ]
    for _ in range(40):
        for s in seqs:
            s.token_ids.append(rng.randrange(3, 500))
            s.num_computed += 1
            if s.num_computed >= len(s.block_table) * BLOCK:
                s.block_table.append(rng.randrange(30, 900))
        batch = ScheduledBatch(seqs)
        inputs = buffers.prepare(batch)
        assert inputs.attn.decode_only
        assert packed_inputs(inputs) == expected_inputs(batch)
