"""Shared set-up for kernel tests: the device they run on, a randomly filled paged KV cache, a RoPE
cos/sin table, and one step's attention split, planned on the CPU or run against the torch reference's
paged attention over the whole step."""

from __future__ import annotations

import numpy as np
import torch
from llmbench.kernels import reference
from llmbench.kernels.attention_split import (
    AttentionSplit,
    plan_attention_split,
    sdpa_backends,
    split_attention,
)

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


def _attention_step(
    q_lens, cached, num_heads=4, num_kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32
):
    """One step's q, its own k and v (the cache rows at its tokens' positions, as the model has just
    written them; v a strided view, as the model's slice of the fused QKV output), the caches, the
    tables, and the host row offsets and lengths."""
    seq_lens = [n + c for n, c in zip(q_lens, cached, strict=True)]
    g = torch.Generator().manual_seed(0)
    k_cache, v_cache, tables = random_paged_kv(seq_lens, block_size, num_kv_heads, head_dim, dtype, 3, g)
    host_tables = tables.cpu()
    slots = [
        int(host_tables[b, p // block_size]) * block_size + p % block_size
        for b in range(len(q_lens))
        for p in range(cached[b], seq_lens[b])
    ]
    rows = torch.tensor(slots, device=DEVICE)
    k = k_cache.view(-1, num_kv_heads, head_dim)[rows]
    v_rows = v_cache.view(-1, num_kv_heads, head_dim)[rows]
    v = torch.cat((v_rows, torch.zeros_like(v_rows)), dim=-1)[..., :head_dim]
    q = torch.randn(sum(q_lens), num_heads, head_dim, generator=g).to(dtype).to(DEVICE)
    query_start = np.concatenate(([0], np.cumsum(q_lens)))
    return q, k, v, k_cache, v_cache, tables, query_start, np.array(seq_lens)


def split_and_reference(
    ops, q_lens, cached, prefill_attention="sdpa", **shape
) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's attention through the planned split with `ops`, and the reference's over the whole step."""
    q, k, v, k_cache, v_cache, tables, query_start, seq_lens = _attention_step(q_lens, cached, **shape)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    split = plan_attention_split(query_start, seq_lens, tables, lens, prefill_attention, k_cache.shape[1])
    assert split is not None
    scale = q.shape[-1] ** -0.5
    with sdpa_backends():
        got = split_attention(q, k, v, k_cache, v_cache, split, scale, ops)
    starts = torch.tensor(query_start, dtype=torch.int32, device=DEVICE)
    want = reference.paged_prefill_attention(q, k_cache, v_cache, tables, starts, lens, scale)
    return got, want


def plan_on_cpu(q_lens, cached, prefill_attention="sdpa", block_size=16) -> AttentionSplit | None:
    """The plan on the CPU, with a device length tensor holding each sequence's index, so that a
    part's gathered lengths (.seq_lens) name its sequences; block tables as wide as the longest."""
    seq_lens = np.array(q_lens) + np.array(cached)
    starts = np.concatenate(([0], np.cumsum(q_lens)))
    index = torch.arange(len(q_lens), dtype=torch.int32)
    tables = index[:, None].repeat(1, -(-int(seq_lens.max()) // block_size))
    split = plan_attention_split(starts, seq_lens, tables, index, prefill_attention, block_size)
    for part in (split.decodes, split.paged) if split else ():
        assert part is None or part.block_tables[:, 0].tolist() == part.seq_lens.tolist()
    return split


# decodes among chunks: ten at the front, then a fresh prompt, a chunk after a prefix, two more decodes
DECODE_STEP = ([1] * 10 + [9, 5, 1, 1], [3, 8, 1, 12, 5, 7, 2, 9, 4, 6, 0, 11, 20, 2])
