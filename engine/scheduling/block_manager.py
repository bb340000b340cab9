"""Paged KV allocation: a fixed pool of blocks, ref counts, per-sequence block tables, and the
prefix cache. A full block's key is a sha256 chained over the whole prefix, so equal keys mean equal
prefixes, not just equal blocks. Freed hashed blocks stay reusable until a fresh block is needed."""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict

from llmbench.engine.scheduling.sequence import Sequence

_ROOT_HASH = b""  # parent of a sequence's first block


def chain_hash(parent: bytes, block_tokens: bytes) -> bytes:
    """A full block's key: sha256 over its parent's key and its token ids (int32 little-endian), as
    vLLM's prefix caching. Python's hash() of int tuples is 64 bits and can be collided on purpose;
    a sha256 collision cannot be crafted."""
    return hashlib.sha256(parent + block_tokens).digest()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        # parallel arrays instead of block objects: a pool can hold 100k+ blocks
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        # what a hit relies on besides its key: the block's own tokens and its prefix's key
        self.block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self.block_parent: list[bytes | None] = [None] * num_blocks
        self.hash_to_block: dict[bytes, int] = {}
        self._pack = struct.Struct(f"<{block_size}i").pack  # a block's token ids as hash input
        # free blocks in two pools: plain ones are handed out first, so cached prefixes live longer
        self.free_plain: list[int] = list(range(num_blocks - 1, -1, -1))
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # least recently freed first

    @property
    def num_free(self) -> int:
        return len(self.free_plain) + len(self.free_cached)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def lookup_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks holding the longest full-block prefix of seq. At least the last token is
        left out, because the model must run on it to produce the next token's logits."""
        if not self.prefix_caching:
            return []
        bs = self.block_size
        tokens = seq.token_ids
        hits: list[int] = []
        parent = _ROOT_HASH
        for i in range((len(tokens) - 1) // bs):
            key = self._block_hash(seq, i)
            block = self.hash_to_block.get(key)
            # a colliding key must never serve another prefix's KV: the block's KV depends on its
            # tokens and on every token before them, which its parent's key stands for
            if (
                block is None
                or self.block_parent[block] != parent
                or self.block_tokens[block] != tuple(tokens[i * bs : (i + 1) * bs])
            ):
                break
            hits.append(block)
            parent = key
        return hits

    def allocate(self, seq: Sequence, num_tokens: int, cached: list[int] | None = None) -> bool:
        """Grow seq's block table to cover num_tokens, first with `cached` prefix blocks (only for
        an empty table). False, changing nothing, when the free pool is too small."""
        table = seq.block_table
        if num_tokens <= len(table) * self.block_size:
            return True
        cached = cached or []
        num_fresh = self.blocks_for(num_tokens) - len(table) - len(cached)
        num_revived = sum(1 for b in cached if self.ref_counts[b] == 0)
        if num_fresh + num_revived > self.num_free:
            return False
        for block in cached:
            if self.ref_counts[block] == 0:
                del self.free_cached[block]
            self.ref_counts[block] += 1
        if cached:
            table.extend(cached)
            seq.num_cached_blocks = len(table)
        for _ in range(num_fresh):
            table.append(self._take_fresh())
        return True

    def free(self, seq: Sequence) -> None:
        # tail first: a prefix's last blocks are the least likely to be shared, so evict them first
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if self.block_hash[block] is None:
                    self.free_plain.append(block)
                else:
                    self.free_cached[block] = None
        seq.block_table = []
        seq.num_cached_blocks = 0

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix (vLLM's and SGLang's POST /reset_prefix_cache), so the next request
        finds none: a benchmark's trial then starts as cold as its first. Blocks in use keep their KV but
        no longer serve hits, and free as plain blocks."""
        for block in self.hash_to_block.values():
            self.block_hash[block] = self.block_tokens[block] = self.block_parent[block] = None
        self.hash_to_block.clear()
        self.free_plain.extend(self.free_cached)
        self.free_cached.clear()

    def cache_full_blocks(self, seq: Sequence, num_tokens: int | None = None) -> None:
        """Register seq's blocks that became full and computed, so later requests can reuse them.
        num_tokens (default: all computed) bounds the tokens considered, e.g. to those read back."""
        num_full = (seq.num_computed if num_tokens is None else num_tokens) // self.block_size
        if num_full <= seq.num_cached_blocks:
            return
        if self.prefix_caching:
            bs = self.block_size
            for i in range(seq.num_cached_blocks, num_full):
                block_hash = self._block_hash(seq, i)
                # equal content computed twice (two requests in flight): keep the first, this one stays plain
                if block_hash not in self.hash_to_block:
                    block = seq.block_table[i]
                    self.hash_to_block[block_hash] = block
                    self.block_hash[block] = block_hash
                    self.block_tokens[block] = tuple(seq.token_ids[i * bs : (i + 1) * bs])
                    self.block_parent[block] = seq.block_hashes[i - 1] if i else _ROOT_HASH
        seq.num_cached_blocks = num_full  # without caching: just marks these blocks as dealt with

    def _block_hash(self, seq: Sequence, index: int) -> bytes:
        """Chained key of seq's full block `index`, memoized on the sequence across preemptions."""
        hashes = seq.block_hashes
        bs = self.block_size
        while len(hashes) <= index:
            i = len(hashes)
            parent = hashes[i - 1] if i else _ROOT_HASH
            hashes.append(chain_hash(parent, self._pack(*seq.token_ids[i * bs : (i + 1) * bs])))
        return hashes[index]

    def _take_fresh(self) -> int:
        if self.free_plain:
            block = self.free_plain.pop()
        else:
            # evict the least recently freed cached block
            block, _ = self.free_cached.popitem(last=False)
            del self.hash_to_block[self.block_hash[block]]
            self.block_hash[block] = None
            self.block_tokens[block] = None
            self.block_parent[block] = None
        self.ref_counts[block] = 1
        return block
