"""Invariant checks for tests and debugging: they walk every block, so keep them off the hot path."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from llmbench.engine.scheduling.batch import ScheduledBatch
from llmbench.engine.scheduling.block_manager import BlockManager
from llmbench.engine.scheduling.sequence import Sequence

if TYPE_CHECKING:
    from llmbench.engine.core.llm_engine import LLMEngine


def assert_block_manager_consistent(block_manager: BlockManager, seqs: list[Sequence]) -> None:
    """Pools, ref counts and the prefix-cache map agree with each other and with `seqs`, the
    sequences currently holding blocks."""
    bm = block_manager
    plain, cached = bm.free_plain, list(bm.free_cached)
    free = plain + cached
    assert len(set(free)) == len(free), "a block sits twice in the free pools"
    assert bm.num_free + bm.num_used == bm.num_blocks
    assert all(0 <= b < bm.num_blocks for b in free), "free pool holds an unknown block id"

    holders = Counter(b for seq in seqs for b in seq.block_table)
    for block, ref_count in enumerate(bm.ref_counts):
        assert ref_count >= 0, f"block {block} has ref count {ref_count}"
        held = holders[block]
        assert ref_count == held, f"block {block}: ref count {ref_count}, held {held} times"
    free_set = set(free)
    for block, ref_count in enumerate(bm.ref_counts):
        assert (ref_count == 0) == (block in free_set), f"block {block}: ref count {ref_count} vs free pools"

    assert all(bm.block_hash[b] is None for b in plain), "a plain free block still carries a hash"
    assert all(bm.block_hash[b] is not None for b in cached), "a cached free block lost its hash"
    for block_hash, block in bm.hash_to_block.items():
        assert bm.block_hash[block] == block_hash, f"block {block} not registered under its hash"
    assert len(bm.hash_to_block) == sum(h is not None for h in bm.block_hash), "stray block hash"
    for block, block_hash in enumerate(bm.block_hash):
        registered = block_hash is not None
        assert (bm.block_tokens[block] is not None) == registered, f"block {block}: tokens vs hash"
        assert (bm.block_parent[block] is not None) == registered, f"block {block}: parent vs hash"

    for seq in seqs:
        assert len(seq.block_table) * bm.block_size >= seq.num_computed, f"{seq} lacks blocks"


def assert_batch_within_blocks(batch: ScheduledBatch, block_size: int) -> None:
    """Every KV slot the batch's forwards write lies in the writing sequence's own blocks: a slot past
    its table would land in the padding (block 0) or out of the pool, another sequence's KV on CUDA.
    A multi-step window moves each sequence one position a forward, up to its last output's."""
    for s in batch.seqs:
        last = s.seq_len - 1 + batch.num_steps - 1
        if batch.num_steps > 1:
            last = min(last, s.seq_len - s.num_outputs + s.sampling.max_tokens - 1)
        assert last < len(s.block_table) * block_size, (
            f"seq {s.seq_id} writes position {last} with {len(s.block_table)} blocks of {block_size}"
        )


def assert_engine_empty(engine: LLMEngine) -> None:
    """No request left anywhere, and every KV block is free (plain or cached) with ref count 0."""
    assert not engine.scheduler.waiting, f"waiting: {list(engine.scheduler.waiting)}"
    assert not engine.scheduler.running, f"running: {engine.scheduler.running}"
    assert not engine.has_unfinished(), "engine still reports unfinished requests"
    assert_block_manager_consistent(engine.block_manager, [])
    assert engine.block_manager.num_free == engine.block_manager.num_blocks
