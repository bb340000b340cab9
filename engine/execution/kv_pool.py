"""One rank's paged KV pool: how many blocks of block_size tokens it holds (the user's count, a memory
budget, or what the device has free), and its tensors, a (K, V) pair of [num_blocks, block_size, KV heads,
head_dim] per layer. A tensor-parallel rank holds its share of the KV heads."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from llmbench.engine.config import EngineConfig
from llmbench.engine.loading.model_facts import ModelFacts

CPU_KV_TOKENS_PER_SEQ = 2048  # CPU pool default: this many tokens per sequence slot ...
CPU_KV_MAX_BYTES = 1 << 30  # ... capped at 1 GiB

KVCache = tuple[torch.Tensor, torch.Tensor]  # one layer's K and V


@dataclass(frozen=True)
class KVPool:
    config: EngineConfig
    facts: ModelFacts
    tp_size: int = 1

    @property
    def block_bytes(self) -> int:
        kv_bytes = self.facts.shape.kv_bytes_per_token(self.facts.dtype.itemsize)
        return self.config.block_size * kv_bytes // self.tp_size

    def num_blocks(self, free_kv_bytes: int | None) -> int:
        """engine.num_gpu_blocks, else the blocks engine.kv_cache_memory_gb holds, else those that fit in
        free_kv_bytes (what a GPU has left once profiled), else the CPU default."""
        c = self.config
        if c.num_gpu_blocks is not None:
            return self._fitting(c.num_gpu_blocks, "engine.num_gpu_blocks")
        if c.kv_cache_memory_gb is not None:
            budget = int(c.kv_cache_memory_gb * 2**30)
            return self._fitting(budget // self.block_bytes, "engine.kv_cache_memory_gb")
        max_len = self.facts.max_model_len
        if free_kv_bytes is not None:
            budget = free_kv_bytes
        else:
            tokens = c.max_num_seqs * min(max_len, CPU_KV_TOKENS_PER_SEQ)
            budget = min(tokens * self.block_bytes // c.block_size, CPU_KV_MAX_BYTES)
        num_blocks = budget // self.block_bytes
        if num_blocks < 1:
            raise ValueError(f"no memory left for the KV cache (budget {budget / 2**30:.2f} GiB)")
        # blocks past every sequence slot at full length can never be used, yet each costs memory and a
        # block-manager entry: a small model on a large GPU would otherwise get tens of millions
        return min(num_blocks, c.max_num_seqs * -(-max_len // c.block_size))

    def _fitting(self, num_blocks: int, key: str) -> int:
        """A pool size the user chose, refused before allocation when the device cannot hold it."""
        device = self.facts.device
        if device.type == "cuda":
            available = torch.cuda.mem_get_info(device)[0]
        else:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if num_blocks < 1:
            raise ValueError(f"{key}: too small for one KV block of {self.block_bytes} bytes")
        needed = (num_blocks + 1) * self.block_bytes  # + the graphs' padding block
        if needed > available:
            raise ValueError(
                f"{key}: a KV pool of {num_blocks} blocks needs {needed / 2**30:.2f} GiB, "
                f"{available / 2**30:.2f} GiB is free on {device}"
            )
        return num_blocks

    def allocate(self, num_blocks: int) -> list[KVCache]:
        s, f = self.facts.shape, self.facts
        layout = (num_blocks, self.config.block_size, s.num_kv_heads // self.tp_size, s.head_dim)
        # zeros, not empty: padded block-table entries point at block 0, and masked garbage could be NaN
        return [
            (
                torch.zeros(layout, dtype=f.dtype, device=f.device),
                torch.zeros(layout, dtype=f.dtype, device=f.device),
            )
            for _ in range(s.num_layers)
        ]
