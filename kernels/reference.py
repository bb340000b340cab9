"""The torch backend: plain, readable implementations of every op the model needs. They are the ground
truth the Triton kernels (kernels/triton_ops.py) are tested against, and the backend used on CPU.

KV cache layout, shared with the Triton kernels: per layer `k_cache, v_cache` of shape
[num_blocks, block_size, num_kv_heads, head_dim]; position p of a sequence lives in block
block_table[p // block_size], row p % block_size, i.e. slot = block * block_size + row."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dim, optionally fused with the residual add that precedes it.
    Returns (normed, new_residual) where new_residual is x + residual (or x)."""
    h = x.float()
    if residual is not None:
        h = h + residual.float()
    new_residual = h.to(x.dtype)
    normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * weight.float()).to(x.dtype), new_residual


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE (the HF Llama convention: the two halves of each head are the pair)."""
    half = head_dim // 2
    cos_sin = cos_sin_cache[positions].float()
    cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        h = x.view(x.shape[0], -1, head_dim).float()
        x1, x2 = h[..., :half], h[..., half:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return out.to(x.dtype).view_as(x)

    return rotate(q), rotate(k)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation on a fused gate-up projection: silu(gate) * up."""
    gate, up = x.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(x.dtype)


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Store each new token's K/V at its slot, in place."""
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    k_cache.view(-1, num_kv_heads, head_dim)[slot_mapping] = k.to(k_cache.dtype)
    v_cache.view(-1, num_kv_heads, head_dim)[slot_mapping] = v.to(v_cache.dtype)


def rope_and_write_kv(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """RoPE on q and k, then k and v stored at their slots; returns the rotated q."""
    q, k = rotary_embedding(positions, q, k, cos_sin_cache, head_dim)
    num_kv_heads = k.shape[1] // head_dim
    shape = (-1, num_kv_heads, head_dim)
    write_kv(k.reshape(shape), v.reshape(shape), k_cache, v_cache, slot_mapping)
    return q


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return F.linear(x, weight, bias)


def linear_silu_and_mul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The MLP's fused gate-up projection followed by its activation."""
    return silu_and_mul(F.linear(x, weight))


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """[n, vocab] -> [n] int64: each row's greedy token (the first index of its max)."""
    return logits.argmax(dim=-1)


def _gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's first seq_len cached rows, [seq_len, Hkv, D]."""
    block_size = cache.shape[1]
    num_blocks = (seq_len + block_size - 1) // block_size
    rows = cache[block_table[:num_blocks].long()]
    return rows.reshape(-1, cache.shape[2], cache.shape[3])[:seq_len]


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor
) -> torch.Tensor:
    """q [..., Tq, Hq, D], k/v [..., Tk, Hkv, D], mask broadcastable to [..., Hq, Tq, Tk] -> [..., Tq, Hq, D];
    query head h reads KV head h // (Hq / Hkv)."""
    group = q.shape[-2] // k.shape[-2]
    k = k.float().repeat_interleave(group, dim=-2)
    v = v.float().repeat_interleave(group, dim=-2)
    scores = torch.einsum("...qhd,...khd->...hqk", q.float(), k) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1)
    return torch.einsum("...hqk,...khd->...qhd", probs, v).to(q.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One query per sequence, at position seq_len - 1 (its own K/V already written). Batched: every
    sequence's blocks are gathered to the longest table and rows past seq_len are masked. Written to
    `out` when given."""
    k = k_cache[block_tables.long()].flatten(1, 2)  # [B, max_blocks * block_size, Hkv, D]
    v = v_cache[block_tables.long()].flatten(1, 2)
    key_pos = torch.arange(k.shape[1], device=q.device)
    valid = key_pos[None, :] < seq_lens[:, None]
    result = _attend(q[:, None], k, v, scale, valid[:, None, None, :])[:, 0]
    return result if out is None else out.copy_(result)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Varlen causal attention over paged K/V. Sequence b's queries are rows
    query_start_loc[b]:query_start_loc[b+1], the last q_len positions of its seq_len tokens; they see
    the cached prefix, earlier chunks and this chunk (all already written to the cache). Written to
    `out` when given."""
    out = torch.empty_like(q) if out is None else out
    starts = query_start_loc.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        start, end = starts[b], starts[b + 1]
        q_len = end - start
        k = _gather_kv(k_cache, block_tables[b], seq_len)
        v = _gather_kv(v_cache, block_tables[b], seq_len)
        query_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        key_pos = torch.arange(seq_len, device=q.device)
        mask = key_pos[None, :] <= query_pos[:, None]
        out[start:end] = _attend(q[start:end], k, v, scale, mask)
    return out
