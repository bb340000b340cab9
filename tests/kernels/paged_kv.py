"""Shared set-up for kernel tests: the device they run on, a randomly filled paged KV cache and a RoPE
cos/sin table."""

from __future__ import annotations

import torch

# without CUDA the kernels run in the Triton interpreter on CPU tensors (tests/conftest.py)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# float32 on the interpreter is exact float32; a GPU's float32 dot rounds operands to tf32
FP32_TOL = 1e-5 if DEVICE == "cpu" else 3e-3


def random_paged_kv(
    seq_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
    spare_blocks: int = 3,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(k_cache, v_cache, block_tables int32 [B, max_blocks]) with each sequence on shuffled blocks, so
    a kernel that ignores the block table reads the wrong rows. Unused table entries point at spare blocks
    of random data, so a kernel that reads beyond seq_len gets a wrong answer."""
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=generator).to(dtype)
    v_cache = torch.randn(shape, generator=generator).to(dtype)
    order = torch.randperm(num_blocks, generator=generator)
    max_blocks = max(max(blocks_per_seq), 1)
    spare = order[sum(blocks_per_seq) :]
    block_tables = spare[torch.randint(len(spare), (len(seq_lens), max_blocks), generator=generator)].int()
    used = 0
    for b, n in enumerate(blocks_per_seq):
        block_tables[b, :n] = order[used : used + n].int()
        used += n
    return k_cache.to(DEVICE), v_cache.to(DEVICE), block_tables.to(DEVICE)


def cos_sin_cache(max_pos: int, head_dim: int) -> torch.Tensor:
    """[max_pos, head_dim] float32, cos in the first half and sin in the second (the kernels' layout)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(max_pos).float(), inv_freq)
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(DEVICE)
