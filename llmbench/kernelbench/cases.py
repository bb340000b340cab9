"""What `llmbench kernels` times: each Triton kernel the engine runs, at Llama-3-8B shapes, as a Case
that builds fresh random inputs and says how many bytes (or FLOPs) one call must move."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from llmbench.kernels import triton_ops
from llmbench.kernels.gemv import gemv

# Llama-3-8B
HIDDEN, INTERMEDIATE, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 4096, 14336, 32, 8, 128, 16
VOCAB = 128256
ELEMENTWISE_TOKENS = (4096, 64)  # a prefill-sized and a decode-sized batch
# the rows of the throughput workload's linears: a full decode batch, and a prefill step's token budget
# (whose LM head runs only on the sampled rows, at most a batch)
DECODE_ROWS, PREFILL_ROWS = 256, 8192
# the model's linears as (name, N, K): qkv, o, the fused gate-up, down and the LM head
LINEARS = (
    ("qkv_proj", (NUM_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM, HIDDEN),
    ("o_proj", HIDDEN, NUM_HEADS * HEAD_DIM),
    ("gate_up_proj", 2 * INTERMEDIATE, HIDDEN),
    ("down_proj", HIDDEN, INTERMEDIATE),
    ("lm_head", VOCAB, HIDDEN),
)
DECODE_TARGET = 0.80  # fraction of copy bandwidth the decode kernel must reach at batch 64, context 2048


@dataclass
class Case:
    kernel: str
    shape: str
    bound: str  # "memory": judged in GB/s against the copy; "compute": in TFLOP/s against the GEMM
    work: float  # bytes moved (memory) or FLOPs (compute) per call
    footprint: float  # bytes of inputs and outputs per call, to size the input rotation
    make: Callable[[], Callable[[], Any]]  # builds fresh random inputs, returns the call to time
    target: float | None = None
    # runs torch's SDPA: a device or torch build whose backend refuses the shape (or its capture in a
    # graph) leaves the row out with a warning instead of failing the run
    optional: bool = False


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=dtype)


def _paged_cache(num_seqs: int, context: int, dtype: torch.dtype):
    """K/V caches holding num_seqs sequences of `context` tokens on shuffled blocks, and their tables."""
    blocks_per_seq = context // BLOCK_SIZE
    num_blocks = num_seqs * blocks_per_seq
    k_cache = _randn(num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    tables = torch.randperm(num_blocks, device="cuda", dtype=torch.int32).view(num_seqs, blocks_per_seq)
    return k_cache, v_cache, tables


def elementwise_cases(t: int, dtype: torch.dtype) -> list[Case]:
    size = dtype.itemsize

    def norm(with_residual: bool):
        x, weight = _randn(t, HIDDEN, dtype=dtype), _randn(HIDDEN, dtype=dtype)
        residual = torch.randn_like(x) if with_residual else None
        return lambda: triton_ops.rms_norm(x, weight, 1e-5, residual)

    def rope_inputs():
        q, k = _randn(t, NUM_HEADS * HEAD_DIM, dtype=dtype), _randn(t, NUM_KV_HEADS * HEAD_DIM, dtype=dtype)
        positions = torch.randint(0, 8192, (t,), device="cuda")
        return q, k, positions, _randn(8192, HEAD_DIM, dtype=torch.float32)

    def cache_and_slots():
        """A paged cache with room for twice the tokens, and distinct random slots for them."""
        k_cache = _randn(2 * t // BLOCK_SIZE, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
        return k_cache, torch.randn_like(k_cache), torch.randperm(2 * t, device="cuda")[:t]

    def rope():
        q, k, positions, cos_sin = rope_inputs()
        return lambda: triton_ops.rotary_embedding(positions, q, k, cos_sin, HEAD_DIM)

    def rope_write():
        (q, k, positions, cos_sin), (k_cache, v_cache, slots) = rope_inputs(), cache_and_slots()
        v = torch.randn_like(k)
        return lambda: triton_ops.rope_and_write_kv(
            positions, q, k, v, cos_sin, HEAD_DIM, k_cache, v_cache, slots
        )

    def silu():
        gate_up = _randn(t, 2 * INTERMEDIATE, dtype=dtype)
        return lambda: triton_ops.silu_and_mul(gate_up)

    def write():
        k, v = _randn(t, NUM_KV_HEADS, HEAD_DIM, dtype=dtype), _randn(t, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
        k_cache, v_cache, slots = cache_and_slots()
        return lambda: triton_ops.write_kv(k, v, k_cache, v_cache, slots)

    hidden_bytes = t * HIDDEN * size
    qk_bytes = t * (NUM_HEADS + NUM_KV_HEADS) * HEAD_DIM * size
    kv_bytes = 2 * t * NUM_KV_HEADS * HEAD_DIM * size
    inter_bytes = t * INTERMEDIATE * size
    heads = f"Hq={NUM_HEADS} Hkv={NUM_KV_HEADS} D={HEAD_DIM}"
    hidden = f"T={t} H={HIDDEN}"
    return [
        Case("rms_norm+residual", hidden, "memory", 4 * hidden_bytes, 4 * hidden_bytes, lambda: norm(True)),
        Case("rms_norm", hidden, "memory", 2 * hidden_bytes, 2 * hidden_bytes, lambda: norm(False)),
        Case(
            "rotary_embedding",
            f"T={t} {heads}",
            "memory",
            2 * qk_bytes + t * HEAD_DIM * 4,
            2 * qk_bytes,
            rope,
        ),
        Case(
            "rope_and_write_kv",
            f"T={t} {heads}",
            "memory",
            2 * qk_bytes + kv_bytes + t * HEAD_DIM * 4,
            2 * qk_bytes + kv_bytes,
            rope_write,
        ),
        Case("silu_and_mul", f"T={t} I={INTERMEDIATE}", "memory", 3 * inter_bytes, 3 * inter_bytes, silu),
        Case(
            "write_kv", f"T={t} Hkv={NUM_KV_HEADS} D={HEAD_DIM}", "memory", 2 * kv_bytes, 2 * kv_bytes, write
        ),
    ]


def decode_case(batch: int, context: int, dtype: torch.dtype) -> Case:
    size = dtype.itemsize
    nbytes = 2 * batch * context * NUM_KV_HEADS * HEAD_DIM * size + 2 * batch * NUM_HEADS * HEAD_DIM * size

    def make():
        k_cache, v_cache, tables = _paged_cache(batch, context, dtype)
        q = _randn(batch, NUM_HEADS, HEAD_DIM, dtype=dtype)
        seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
        scale = HEAD_DIM**-0.5
        return lambda: triton_ops.paged_decode_attention(q, k_cache, v_cache, tables, seq_lens, scale)

    target = DECODE_TARGET if (batch, context) == (64, 2048) else None
    return Case("paged_decode_attention", f"B={batch} ctx={context}", "memory", nbytes, nbytes, make, target)


def prefill_case(num_seqs: int, new_tokens: int, cached: int, dtype: torch.dtype) -> Case:
    """num_seqs sequences each prefilling new_tokens after `cached` already-cached tokens."""
    size = dtype.itemsize
    context = cached + new_tokens
    # query i (0-based in its chunk) sees cached + i + 1 keys; QK^T and PV are 2 * D FLOPs per pair each
    pairs = num_seqs * (cached * new_tokens + new_tokens * (new_tokens + 1) // 2)
    footprint = num_seqs * (2 * new_tokens * NUM_HEADS + 2 * context * NUM_KV_HEADS) * HEAD_DIM * size

    def make():
        k_cache, v_cache, tables = _paged_cache(num_seqs, context, dtype)
        q = _randn(num_seqs * new_tokens, NUM_HEADS, HEAD_DIM, dtype=dtype)
        starts = torch.arange(0, num_seqs + 1, device="cuda", dtype=torch.int32) * new_tokens
        seq_lens = torch.full((num_seqs,), context, device="cuda", dtype=torch.int32)
        return lambda: triton_ops.paged_prefill_attention(
            q, k_cache, v_cache, tables, starts, seq_lens, HEAD_DIM**-0.5
        )

    shape = f"B={num_seqs} new={new_tokens} cached={cached}"
    flops = 4 * HEAD_DIM * NUM_HEADS * pairs
    return Case("paged_prefill_attention", shape, "compute", flops, footprint, make)


def gemv_cases(dtype: torch.dtype) -> list[Case]:
    """The one-row linears of a bs1 decode: each is one pass over its weight (the gate-up projection
    with its activation fused in)."""
    size = dtype.itemsize

    def make(n: int, k: int, gated: bool):
        x, weight = _randn(1, k, dtype=dtype), _randn(n, k, dtype=dtype)
        return lambda: gemv(x, weight, gated=gated)

    cases = []
    for name, n, k in LINEARS:
        gated = name == "gate_up_proj"
        label = f"gemv gated ({name})" if gated else f"gemv ({name})"
        cases.append(
            Case(
                label,
                f"M=1 N={n} K={k}",
                "memory",
                n * k * size,
                n * k * size,
                lambda n=n, k=k, g=gated: make(n, k, g),
            )
        )
    return cases


def linear_cases(rows: int, dtype: torch.dtype) -> list[Case]:
    """The model's linears at `rows` tokens through the engine's op (cuBLAS past the GEMV's rows),
    judged by FLOPs against the GEMM ceiling: a decode batch's GEMMs read each weight once for 2 *
    rows FLOPs a weight, so at 256 rows they sit near the H200's ridge point, where a step's roofline
    bound takes the larger of their bytes and FLOPs."""

    def make(n: int, k: int):
        x, weight = _randn(rows, k, dtype=dtype), _randn(n, k, dtype=dtype)
        return lambda: triton_ops.linear(x, weight)

    size = dtype.itemsize
    return [
        Case(
            f"linear ({name})",
            f"M={rows} N={n} K={k}",
            "compute",
            2 * rows * n * k,
            (n * k + rows * (n + k)) * size,
            lambda n=n, k=k: make(n, k),
        )
        for name, n, k in LINEARS
        if rows <= DECODE_ROWS or name != "lm_head"
    ]


def argmax_cases(dtype: torch.dtype) -> list[Case]:
    """Greedy sampling over the vocabulary, for one row and for a full batch."""

    def make(rows: int):
        logits = _randn(rows, VOCAB, dtype=dtype)
        return lambda: triton_ops.argmax(logits)

    cases = []
    for rows in (1, 256):
        nbytes = rows * VOCAB * dtype.itemsize
        cases.append(
            Case("argmax", f"rows={rows} V={VOCAB}", "memory", nbytes, nbytes, lambda r=rows: make(r))
        )
    return cases
