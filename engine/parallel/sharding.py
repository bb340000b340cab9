"""Which slice of each full parameter a tensor-parallel rank holds (Megatron-style). QKV and gate-up
are column-parallel: each of their parts (Q, K, V; gate, up) is split by output rows, so a rank holds
whole heads and whole MLP channels. O and down are row-parallel: split by input columns, their
partial outputs summed by one all-reduce each. The embedding and the LM head are split by vocabulary
rows, padded so every rank holds the same count. Norms are replicated."""

from __future__ import annotations

import torch
from llmbench.engine.models.shape import LlamaShape


def shard_plan(name: str, shape: LlamaShape) -> tuple[int, list[int]] | None:
    """(dimension, sizes of the fused parts along it) by which parameter `name` is split; None for a
    replicated one. Each part is split over the ranks on its own."""
    if ".qkv_proj." in name:
        return 0, [shape.q_size, shape.kv_size, shape.kv_size]
    if ".gate_up_proj." in name:
        return 0, [shape.intermediate_size, shape.intermediate_size]
    if ".o_proj." in name:
        return 1, [shape.q_size]
    if ".down_proj." in name:
        return 1, [shape.intermediate_size]
    if name in ("embed_tokens.weight", "lm_head.weight"):
        return 0, [shape.vocab_size]
    return None


def part_range(length: int, rank: int, size: int) -> tuple[int, int]:
    """[start, end) of rank's slice of a part `length` long (short or empty only past the vocabulary)."""
    per = -(-length // size)
    start = min(rank * per, length)
    return start, min(start + per, length)


def take_shard(full: torch.Tensor, plan: tuple[int, list[int]] | None, rank: int, size: int) -> torch.Tensor:
    """Rank's slice of a full parameter."""
    if plan is None:
        return full
    dim, parts = plan
    pieces = []
    for part in full.split(parts, dim):
        start, end = part_range(part.shape[dim], rank, size)
        pieces.append(pad_to(part.narrow(dim, start, end - start), dim, -(-part.shape[dim] // size)))
    return torch.cat(pieces, dim) if len(pieces) > 1 else pieces[0]


def pad_to(piece: torch.Tensor, dim: int, length: int) -> torch.Tensor:
    """Zero rows appended along dim up to length (the vocabulary's padding rows)."""
    missing = length - piece.shape[dim]
    if missing == 0:
        return piece
    pad_shape = list(piece.shape)
    pad_shape[dim] = missing
    return torch.cat([piece, piece.new_zeros(pad_shape)], dim)
