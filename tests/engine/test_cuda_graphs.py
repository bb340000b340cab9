"""Decode CUDA graphs: bucket choice, padding into the static buffers, and that the padded forward a graph
captures gives the eager logits for the real rows while padding rows touch only the spare block. The
padded forward runs eagerly on CPU; capture and replay are checked on a GPU when there is one."""

import random

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.cuda_graphs import DecodeGraphs, graph_bucket
from llmbench.engine.execution.input_batch import InputBuffers
from llmbench.engine.loading.loader import load_model
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq

from tests.engine.device_ops import DeviceOps

BLOCK = 4
NUM_BLOCKS = 40  # the spare (padding) block is index NUM_BLOCKS
SIZES = [1, 2, 4, 8]
MAX_BLOCKS_PER_SEQ = 12
GREEDY = SamplingParams(max_tokens=64, ignore_eos=True)


def test_graph_bucket_is_the_smallest_size_that_fits():
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert [graph_bucket(n, sizes) for n in (1, 2, 3, 5, 8, 9, 200, 256)] == [1, 2, 4, 8, 8, 16, 256, 256]
    assert graph_bucket(257, sizes) is None
    assert graph_bucket(3, [6]) == 6


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = EngineConfig(model=ModelConfig(preset="tiny", device="cpu", dtype="float32"))
    return load_model(config.model, resolve_model_facts(config))


def kv_caches(model, seed: int = 0) -> list:
    s = model.shape
    layout = (NUM_BLOCKS + 1, BLOCK, s.num_kv_heads, s.head_dim)
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(layout, generator=gen), torch.randn(layout, generator=gen)) for _ in range(s.num_layers)
    ]


def decode_batch(num_seqs: int, seed: int) -> ScheduledBatch:
    """num_seqs decodes with random contexts over disjoint random blocks; the cache already holds
    random K/V for every earlier position."""
    rng = random.Random(seed)
    free = list(range(NUM_BLOCKS))
    rng.shuffle(free)
    seqs = []
    for i in range(num_seqs):
        length = rng.randrange(2, 14)
        table = [free.pop() for _ in range(-(-length // BLOCK))]
        tokens = [rng.randrange(3, 512) for _ in range(length)]
        seqs.append(ScheduledSeq(i, tokens, length - 1, 1, table, GREEDY, sample=True, num_outputs=1))
    return ScheduledBatch(seqs)


def graphs_for(model, caches) -> DecodeGraphs:
    return DecodeGraphs(model, caches, SIZES, MAX_BLOCKS_PER_SEQ, pad_block=NUM_BLOCKS, block_size=BLOCK)


def layout_of(batch: ScheduledBatch):
    buffers = InputBuffers(BLOCK, torch.device("cpu"))
    buffers.prepare(batch)
    return buffers.layout


def test_handles_only_decode_batches_that_fit_a_bucket(model):
    graphs = graphs_for(model, kv_caches(model))
    assert graphs.handles(layout_of(decode_batch(3, seed=0)))
    assert not graphs.handles(layout_of(decode_batch(9, seed=0)))  # past the largest bucket
    prefill = decode_batch(2, seed=0)
    prefill.seqs[0].num_outputs = 0  # the last prompt token, not a decode
    assert not graphs.handles(layout_of(prefill))
    not_sampled = decode_batch(2, seed=0)
    not_sampled.seqs[1].sample = False
    assert not graphs.handles(layout_of(not_sampled))


def test_load_pads_to_the_bucket_and_resets_stale_rows(model):
    graphs = graphs_for(model, kv_caches(model))
    buffers = InputBuffers(BLOCK, torch.device("cpu"))
    big, small = decode_batch(7, seed=1), decode_batch(3, seed=2)
    assert graphs.load(buffers.prepare(big)) == 8
    assert graphs.load(buffers.prepare(small)) == 4
    pad_slot = NUM_BLOCKS * BLOCK
    expected_slots = [
        s.block_table[s.num_computed // BLOCK] * BLOCK + s.num_computed % BLOCK for s in small.seqs
    ]
    assert graphs.slot_mapping[:3].tolist() == expected_slots
    # row 3 held the 7-sequence batch: bucket 4 runs it, so its write goes back to the spare block
    assert graphs.slot_mapping[3].item() == pad_slot
    assert graphs.input_ids[:3].tolist() == [s.token_ids[-1] for s in small.seqs]
    assert graphs.positions[:3].tolist() == [s.num_computed for s in small.seqs]
    assert graphs.seq_lens[:3].tolist() == [s.seq_len for s in small.seqs]
    for row, s in enumerate(small.seqs):
        assert graphs.block_tables[row, : len(s.block_table)].tolist() == s.block_table
    # rows past bucket 4 are not run; once a batch of 5 runs bucket 8, they are reset too
    assert graphs.load(buffers.prepare(decode_batch(5, seed=3))) == 8
    assert graphs.slot_mapping[5:8].tolist() == [pad_slot] * 3
    # rows never loaded stay pure padding: one token in the spare block
    assert graphs.seq_lens[7:].tolist() == [1] and graphs.block_tables[7].tolist() == [NUM_BLOCKS] * 12


def test_load_copies_block_tables_only_when_they_changed(model):
    """A steady decode's tables are the static buffer's already; growing one, or another batch of the
    same shape, copies them again."""
    graphs = graphs_for(model, kv_caches(model))
    buffers = InputBuffers(BLOCK, torch.device("cpu"))
    batch = decode_batch(3, seed=5)
    graphs.load(buffers.prepare(batch))
    for s in batch.seqs:  # a block reserved ahead, so the next token has a slot wherever it falls
        s.block_table.append(NUM_BLOCKS - 1 - s.seq_id)
    graphs.load(buffers.prepare(batch))
    graphs.block_tables[0, 0] = -7  # shows whether the next load copies the tables
    for s in batch.seqs:  # the next decode: one more token, the same table lists
        s.token_ids.append(5)
        s.num_computed += 1
    graphs.load(buffers.prepare(batch))
    assert graphs.block_tables[0, 0].item() == -7
    batch.seqs[1].block_table.append(NUM_BLOCKS - 4)
    graphs.load(buffers.prepare(batch))
    assert [graphs.block_tables[row, : len(s.block_table)].tolist() for row, s in enumerate(batch.seqs)] == [
        s.block_table for s in batch.seqs
    ]
    graphs.block_tables[0, 0] = -7
    other = decode_batch(3, seed=6)
    graphs.load(buffers.prepare(other))
    assert graphs.block_tables[0, : len(other.seqs[0].block_table)].tolist() == other.seqs[0].block_table


def test_load_takes_a_later_forward_of_a_window_with_its_sampled_tokens(model):
    """A single-step decode loads ids, positions and lengths in one copy; a window's later forward,
    whose ids are the tokens just sampled, loads them one by one."""
    graphs = graphs_for(model, kv_caches(model))
    batch = decode_batch(3, seed=4)
    for s in batch.seqs:
        s.sampling = SamplingParams(max_tokens=64)
        s.block_table += [NUM_BLOCKS - 1] * 2  # room for the window
    batch.num_steps = 3
    window = InputBuffers(BLOCK, torch.device("cpu")).prepare(batch)
    assert graphs.load(window) == 4 and window.decode_rows is None
    assert graphs.positions[:3].tolist() == [s.num_computed for s in batch.seqs]
    sampled = torch.tensor([61, 62, 63])
    assert graphs.load(window.next_forward(2, sampled)) == 4
    assert graphs.input_ids[:3].tolist() == [61, 62, 63]
    assert graphs.positions[:3].tolist() == [s.num_computed + 2 for s in batch.seqs]
    assert graphs.seq_lens[:3].tolist() == [s.num_computed + 3 for s in batch.seqs]
    moved = [s.num_computed + 2 for s in batch.seqs]
    expected = [s.block_table[p // BLOCK] * BLOCK + p % BLOCK for s, p in zip(batch.seqs, moved, strict=True)]
    assert graphs.slot_mapping[:3].tolist() == expected


@pytest.mark.parametrize("num_seqs", [1, 3, 5])
def test_padded_forward_matches_eager_and_writes_only_its_slots(model, num_seqs):
    batch = decode_batch(num_seqs, seed=num_seqs)
    inputs = InputBuffers(BLOCK, torch.device("cpu")).prepare(batch)
    eager_caches, padded_caches = kv_caches(model), kv_caches(model)
    with torch.inference_mode():
        hidden = model(inputs.input_ids, inputs.positions, inputs.attn, eager_caches)
        eager = model.compute_logits(hidden[inputs.sample_rows])
        graphs = graphs_for(model, padded_caches)
        bucket = graphs.load(inputs)
        padded = graphs.forward(bucket)
    assert padded.shape == (graph_bucket(num_seqs, SIZES), model.shape.vocab_size)
    torch.testing.assert_close(padded[:num_seqs], eager, rtol=1e-4, atol=1e-4)
    # the same K/V landed in the live blocks; padding rows wrote only into the spare block
    for (k_eager, v_eager), (k_padded, v_padded) in zip(eager_caches, padded_caches, strict=True):
        torch.testing.assert_close(k_padded[:NUM_BLOCKS], k_eager[:NUM_BLOCKS])
        torch.testing.assert_close(v_padded[:NUM_BLOCKS], v_eager[:NUM_BLOCKS])
    if bucket > num_seqs:
        fresh_spare = kv_caches(model)[0][0][NUM_BLOCKS]
        assert not torch.equal(padded_caches[0][0][NUM_BLOCKS], fresh_spare)


# GPU: capture and replay


def tiny_engine(cuda_graphs: bool, backend: str = "triton", **toggles) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=ModelConfig(preset="tiny", device="cuda", dtype="float32"),
            block_size=BLOCK,
            num_gpu_blocks=256,
            max_num_seqs=16,
            cuda_graphs=cuda_graphs,
            cuda_graph_sizes=[1, 2, 4, 8],
            attention_backend=backend,
            **toggles,
        )
    )


def mixed_prompts(count: int) -> list[list[int]]:
    rng = random.Random(7)
    return [[rng.randrange(3, 512) for _ in range(rng.randrange(1, 60))] for _ in range(count)]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_graph_replay_gives_the_eager_tokens(backend):
    # 12 requests: batches shrink from 12 (eager, past the largest bucket) through every bucket
    prompts = mixed_prompts(12)
    params = [SamplingParams(max_tokens=8 + 4 * i, ignore_eos=True) for i in range(12)]
    eager = tiny_engine(cuda_graphs=False, backend=backend)
    expected = eager.generate(prompts, params)
    eager.shutdown()
    graphed = tiny_engine(cuda_graphs=True, backend=backend)
    assert sorted(graphed.executor.graphs.graphs) == [1, 2, 4, 8]
    assert graphed.generate(prompts, params) == expected
    graphed.shutdown()


@pytest.mark.gpu
def test_a_steady_greedy_decode_step_is_three_copies_and_the_readback():
    """Once a batch's tables are in the graph's buffers, a greedy decode step through the model
    runner is one host-to-device copy of the packed inputs, two copies into the static buffers, the
    replay (which samples too: its argmax is captured) and the tokens' copy into a pinned row of the
    readback ring; no sampling op, no argmax launch, no allocation. The tokens are the eager runner's."""
    batch = decode_batch(7, seed=3)
    eager = tiny_engine(cuda_graphs=False)
    with torch.inference_mode():
        eager_forwards = list(eager.executor.execute(batch))
    torch.cuda.synchronize()
    expected = [t.host.tolist() for t in eager_forwards]
    eager.shutdown()
    engine = tiny_engine(cuda_graphs=True)
    runner = engine.executor
    with torch.inference_mode():
        list(runner.execute(batch))
        with DeviceOps() as device:
            forwards = list(runner.execute(batch))  # the same step again: same tables, same KV slots
    torch.cuda.synchronize()
    assert device.ops == ["copy_", "copy_", "copy_", "copy_"]
    assert [t.host.tolist() for t in forwards] == expected
    engine.shutdown()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "toggles",
    [
        {"async_scheduling": True},
        {"num_scheduler_steps": 4, "async_scheduling": True, "stream_multi_step": False},
    ],
)
def test_graphs_with_tokens_read_a_step_late_give_the_eager_tokens(toggles):
    """Overlapped steps keep two steps' forwards unread at once: each forward's tokens land in their own
    row of the readback ring, and the graphs' argmax output, overwritten by every replay, is read on
    the device before the next one."""
    prompts = mixed_prompts(12)
    params = [SamplingParams(max_tokens=8 + 4 * i, ignore_eos=True) for i in range(12)]
    eager = tiny_engine(cuda_graphs=False)
    expected = eager.generate(prompts, params)
    eager.shutdown()
    engine = tiny_engine(cuda_graphs=True, **toggles)
    assert engine.generate(prompts, params) == expected
    engine.shutdown()


@pytest.mark.gpu
def test_replay_after_a_larger_batch_leaves_live_kv_alone():
    engine = tiny_engine(cuda_graphs=True)
    graphs = engine.executor.graphs
    runner = engine.executor
    big = decode_batch(7, seed=3)
    with torch.inference_mode():
        graphs.run(runner.inputs.prepare(big))
        before = [k.clone() for k, _ in runner.kv_caches]
        small = ScheduledBatch(big.seqs[:2])
        graphs.run(runner.inputs.prepare(small))
    torch.cuda.synchronize()
    touched = {s.block_table[s.num_computed // BLOCK] for s in small.seqs}
    for (k, _), k_before in zip(runner.kv_caches, before, strict=True):
        for block in range(runner.num_blocks):
            if block not in touched:
                assert torch.equal(k[block], k_before[block]), f"block {block} changed"
