import hashlib
import struct

import pytest
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling import block_manager
from llmbench.engine.scheduling.block_manager import BlockManager
from llmbench.engine.scheduling.check import assert_block_manager_consistent
from llmbench.engine.scheduling.sequence import Sequence

BLOCK_SIZE = 4


class Pool:
    """A block manager plus the sequences holding blocks, checked after every test."""

    def __init__(self, num_blocks: int, prefix_caching: bool = True):
        self.bm = BlockManager(num_blocks, BLOCK_SIZE, prefix_caching)
        self.holders: list[Sequence] = []
        self._next_id = 0

    def admit(self, prompt: list[int]) -> Sequence:
        """Allocate a new sequence the way the scheduler does (prefix lookup first) and compute it."""
        seq = Sequence(self._next_id, f"r{self._next_id}", prompt, SamplingParams(), 0.0)
        self._next_id += 1
        cached = self.bm.lookup_prefix(seq)
        assert self.bm.allocate(seq, len(prompt), cached)
        seq.num_cached_tokens = len(cached) * BLOCK_SIZE
        seq.num_computed = len(prompt)
        self.bm.cache_full_blocks(seq)
        self.holders.append(seq)
        return seq

    def cached_tokens(self, first_token: int) -> int:
        """Prefix-cache hit, without allocating, for a 5-token prompt starting at first_token."""
        probe = Sequence(-1, "probe", list(range(first_token, first_token + 4)) + [0], SamplingParams(), 0.0)
        return len(self.bm.lookup_prefix(probe)) * BLOCK_SIZE

    def release(self, seq: Sequence) -> None:
        self.bm.free(seq)
        self.holders.remove(seq)

    def check(self) -> None:
        assert_block_manager_consistent(self.bm, self.holders)


@pytest.fixture
def pool_factory():
    pools: list[Pool] = []

    def make(num_blocks: int, prefix_caching: bool = True) -> Pool:
        pools.append(Pool(num_blocks, prefix_caching))
        return pools[-1]

    yield make
    for pool in pools:
        pool.check()
        for seq in list(pool.holders):
            pool.release(seq)
        pool.check()
        assert pool.bm.num_free == pool.bm.num_blocks


def test_allocate_and_free_counts(pool_factory):
    pool = pool_factory(8, prefix_caching=False)
    seq = pool.admit(list(range(10)))  # 10 tokens -> 3 blocks
    assert len(seq.block_table) == 3
    assert (pool.bm.num_used, pool.bm.num_free) == (3, 5)
    pool.check()
    pool.release(seq)
    assert (pool.bm.num_used, pool.bm.num_free) == (0, 8)
    assert pool.bm.hash_to_block == {}


def test_allocate_fails_without_side_effects(pool_factory):
    pool = pool_factory(4)
    pool.admit(list(range(12)))  # 3 blocks
    seq = Sequence(99, "big", list(range(100, 108)), SamplingParams(), 0.0)
    assert not pool.bm.allocate(seq, 8)
    assert seq.block_table == []
    assert pool.bm.num_free == 1


def test_growing_table_allocates_only_at_block_boundaries(pool_factory):
    pool = pool_factory(8)
    seq = pool.admit([1, 2, 3])
    assert pool.bm.allocate(seq, 4) and len(seq.block_table) == 1
    assert pool.bm.allocate(seq, 5) and len(seq.block_table) == 2
    assert pool.bm.num_used == 2


def test_prefix_hit_reuses_full_blocks_of_a_finished_request(pool_factory):
    pool = pool_factory(16)
    first = pool.admit(list(range(10)))  # blocks 0-3 and 4-7 full, 8-9 partial
    first_blocks = list(first.block_table)
    pool.release(first)
    assert pool.bm.num_free == 16  # cached blocks count as free

    second = pool.admit(list(range(10)) + [50, 51])
    assert second.num_cached_tokens == 8
    assert second.block_table[:2] == first_blocks[:2]
    assert [pool.bm.ref_counts[b] for b in second.block_table] == [1, 1, 1]


def test_prefix_hit_shares_blocks_of_a_running_request(pool_factory):
    pool = pool_factory(16)
    first = pool.admit(list(range(9)))
    second = pool.admit(list(range(8)) + [77, 78])
    assert second.num_cached_tokens == 8
    assert [pool.bm.ref_counts[b] for b in first.block_table[:2]] == [2, 2]
    assert pool.bm.num_used == 4  # 3 + 1 fresh
    pool.release(first)
    assert [pool.bm.ref_counts[b] for b in second.block_table[:2]] == [1, 1]
    assert pool.bm.num_used == 3


def test_whole_prompt_is_never_a_cache_hit(pool_factory):
    pool = pool_factory(16)
    pool.release(pool.admit(list(range(8))))  # exactly two full blocks cached
    again = pool.admit(list(range(8)))
    assert again.num_cached_tokens == 4  # the last block is recomputed for the next token's logits


def test_hash_is_chained_over_the_prefix(pool_factory):
    pool = pool_factory(16)
    first = pool.admit([1, 2, 3, 4, 5, 6, 7, 8, 9])
    other = pool.admit([9, 9, 9, 9, 5, 6, 7, 8, 9])
    # equal second blocks behind different first blocks hash apart and are both registered
    assert first.block_hashes[1] != other.block_hashes[1]
    assert len(pool.bm.hash_to_block) == 4
    assert other.num_cached_tokens == 0


def test_generated_tokens_become_cached_as_blocks_fill(pool_factory):
    pool = pool_factory(16)
    seq = pool.admit([1, 2, 3])
    assert pool.bm.hash_to_block == {}
    for token in (4, 5):
        seq.token_ids.append(token)
        assert pool.bm.allocate(seq, seq.num_computed + 1)
        seq.num_computed += 1
        pool.bm.cache_full_blocks(seq)
    assert len(pool.bm.hash_to_block) == 1  # [1, 2, 3, 4] is full and computed; [5] is not
    pool.release(seq)
    assert pool.admit([1, 2, 3, 4, 5, 6]).num_cached_tokens == 4


def test_plain_free_blocks_are_used_before_evicting_cached_ones(pool_factory):
    pool = pool_factory(4)
    first = pool.admit([1, 2, 3, 4, 5])
    cached_block = first.block_table[0]
    pool.release(first)  # one cached block, one plain partial block
    assert list(pool.bm.free_cached) == [cached_block]
    filler = pool.admit(list(range(100, 112)))  # 3 blocks: exactly the plain ones
    assert cached_block not in filler.block_table
    assert list(pool.bm.free_cached) == [cached_block]
    pool.release(filler)
    assert pool.admit([1, 2, 3, 4, 5]).num_cached_tokens == 4


def test_eviction_follows_lru_order_of_freeing(pool_factory):
    pool = pool_factory(4)
    a, b, c = (pool.admit([base, base + 1, base + 2, base + 3]) for base in (10, 20, 30))
    filler = pool.admit([99])
    for seq in (filler, a, b, c):  # a's block frees before b's before c's
        pool.release(seq)
    assert len(pool.bm.free_cached) == 3

    # reuse b: once released again it is the most recently freed
    pool.release(pool.admit([20, 21, 22, 23, 1]))
    assert [pool.cached_tokens(base) for base in (10, 20, 30)] == [4, 4, 4]

    taker = pool.admit([7, 7])  # takes the plain block
    assert pool.bm.allocate(taker, 8)  # first eviction: a, the least recently freed
    assert [pool.cached_tokens(base) for base in (10, 20, 30)] == [0, 4, 4]
    assert pool.bm.allocate(taker, 12)  # then c, since b was freed after it
    assert [pool.cached_tokens(base) for base in (10, 20, 30)] == [0, 4, 0]


def test_evicting_drops_the_hash(pool_factory):
    pool = pool_factory(2)
    first = pool.admit([1, 2, 3, 4, 5])
    pool.release(first)
    assert list(pool.bm.hash_to_block) == [first.block_hashes[0]]
    pool.admit([6, 7, 8, 9, 10, 11])  # needs both blocks: evicts the cached one
    assert first.block_hashes[0] not in pool.bm.hash_to_block
    assert not pool.bm.free_cached


def test_hash_collision_is_not_served(pool_factory):
    pool = pool_factory(8)
    first = pool.admit([1, 2, 3, 4, 5])
    # simulate a colliding hash: the registered block holds different tokens than the probe
    pool.bm.block_tokens[first.block_table[0]] = (9, 9, 9, 9)
    assert pool.admit([1, 2, 3, 4, 5]).num_cached_tokens == 0


def test_keys_are_sha256_chained_over_the_prefix(pool_factory):
    pool = pool_factory(8)
    seq = pool.admit([1, 2, 3, 4, 5, 6, 7, 8, 9])
    first = hashlib.sha256(struct.pack("<4i", 1, 2, 3, 4)).digest()
    assert seq.block_hashes == [first, hashlib.sha256(first + struct.pack("<4i", 5, 6, 7, 8)).digest()]
    assert pool.bm.block_parent[seq.block_table[1]] == first


def equal_last_blocks(pool) -> tuple[list[int], list[int]]:
    """Prefixes [A, X] (registered) and [B, X] with B's block cached by a third prompt [B, Y]:
    the one hit [B, X] may take from the cache is B."""
    a, b, x, y = [1, 2, 3, 4], [9, 9, 9, 9], [5, 6, 7, 8], [0, 0, 0, 0]
    return pool.admit(a + x + [0]).block_table, pool.admit(b + y + [0]).block_table


def test_equal_last_blocks_behind_different_prefixes_never_share_kv(pool_factory):
    pool = pool_factory(16)
    a_x, b_y = equal_last_blocks(pool)
    b_x = pool.admit([9, 9, 9, 9, 5, 6, 7, 8, 0])
    assert b_x.num_cached_tokens == 4 and b_x.block_table[0] == b_y[0]
    assert b_x.block_table[1] != a_x[1]


def test_a_key_collision_is_caught_by_the_parent_check(pool_factory, monkeypatch):
    # a broken hash that ignores the parent: [A, X] and [B, X] get equal keys for X
    monkeypatch.setattr(block_manager, "chain_hash", lambda parent, tokens: hashlib.sha256(tokens).digest())
    pool = pool_factory(16)
    a_x, _ = equal_last_blocks(pool)
    b_x = pool.admit([9, 9, 9, 9, 5, 6, 7, 8, 0])
    assert b_x.block_hashes[1] == pool.bm.block_hash[a_x[1]]  # the collision is real
    assert b_x.num_cached_tokens == 4 and a_x[1] not in b_x.block_table


def test_a_constant_hash_serves_nothing_but_equal_prefixes(pool_factory, monkeypatch):
    monkeypatch.setattr(block_manager, "chain_hash", lambda parent, tokens: b"same")
    pool = pool_factory(16)
    pool.admit([1, 2, 3, 4, 5, 6, 7, 8, 0])
    assert pool.admit([9, 9, 9, 9, 5, 6, 7, 8, 0]).num_cached_tokens == 0
    assert pool.admit([1, 2, 3, 4, 9, 9, 9, 9, 0]).num_cached_tokens == 4
    # every key is b"same": the second block can never be found under it
    assert pool.admit([1, 2, 3, 4, 5, 6, 7, 8, 0]).num_cached_tokens == 4


def test_prefix_caching_off_never_hashes(pool_factory):
    pool = pool_factory(8, prefix_caching=False)
    pool.release(pool.admit(list(range(9))))
    assert pool.admit(list(range(9))).num_cached_tokens == 0
    assert pool.bm.hash_to_block == {} and not pool.bm.free_cached
