"""`llmbench kernels`: time each Triton kernel at Llama-3-8B shapes against ceilings measured in the
same run (a device-to-device copy for bandwidth, a large bf16 GEMM for FLOP rate).

Each timing is the median of many CUDA-event-timed runs after warm-up (triton.testing.do_bench, which
also flushes L2 between runs), on random data sized well past the L2 cache."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from rich.table import Table

from kernels import triton_ops

logger = logging.getLogger(__name__)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Llama-3-8B
HIDDEN, INTERMEDIATE, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 4096, 14336, 32, 8, 128, 16
NUM_TOKENS = 4096  # a prefill-sized batch for the element-wise kernels: ~100+ MB moved, past the 60 MB L2
DECODE_TARGET = 0.80  # fraction of copy bandwidth the decode kernel must reach at batch 64, context 2048


class KernelBenchError(RuntimeError):
    """The benchmark cannot run here (no GPU, unknown dtype)."""


@dataclass
class KernelTiming:
    kernel: str
    shape: str
    median_us: float
    bound: str  # "memory": judged in GB/s against the copy; "compute": in TFLOP/s against the GEMM
    achieved: float
    fraction_of_ceiling: float
    target: float | None = None


def _median_ms(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def measure_ceilings(dtype: torch.dtype) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and dense GEMM rate on random data."""
    src = torch.randn(2**29 // 2, device="cuda", dtype=dtype)  # 512 MiB
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src))
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    gemm_ms = _median_ms(lambda: a @ b)
    return {
        "copy_gb_per_s": 2 * src.numel() * src.element_size() / copy_ms / 1e6,
        "gemm_tflop_per_s": 2 * n**3 / gemm_ms / 1e9,
    }


def _paged_cache(num_seqs: int, context: int, dtype: torch.dtype):
    """K/V caches holding num_seqs sequences of `context` tokens on shuffled blocks, and their tables."""
    blocks_per_seq = context // BLOCK_SIZE
    num_blocks = num_seqs * blocks_per_seq
    shape = (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    k_cache = torch.randn(shape, device="cuda", dtype=dtype)
    v_cache = torch.randn(shape, device="cuda", dtype=dtype)
    tables = torch.randperm(num_blocks, device="cuda", dtype=torch.int32).view(num_seqs, blocks_per_seq)
    return k_cache, v_cache, tables


def _elementwise_cases(dtype: torch.dtype) -> list[tuple[str, str, Callable[[], Any], float]]:
    """(kernel, shape, fn, bytes moved) for the memory-bound element-wise kernels."""
    t, size = NUM_TOKENS, torch.finfo(dtype).bits // 8
    x = torch.randn(t, HIDDEN, device="cuda", dtype=dtype)
    residual, weight = torch.randn_like(x), torch.randn(HIDDEN, device="cuda", dtype=dtype)
    gate_up = torch.randn(t, 2 * INTERMEDIATE, device="cuda", dtype=dtype)
    q = torch.randn(t, NUM_HEADS * HEAD_DIM, device="cuda", dtype=dtype)
    k = torch.randn(t, NUM_KV_HEADS * HEAD_DIM, device="cuda", dtype=dtype)
    positions = torch.randint(0, 8192, (t,), device="cuda")
    cos_sin = torch.randn(8192, HEAD_DIM, device="cuda", dtype=torch.float32)
    kv_heads = k.view(t, NUM_KV_HEADS, HEAD_DIM)
    k_cache = torch.empty(t // BLOCK_SIZE * 2, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    v_cache = torch.empty_like(k_cache)
    slots = torch.randperm(k_cache.shape[0] * BLOCK_SIZE, device="cuda")[:t]
    qk_bytes = t * (NUM_HEADS + NUM_KV_HEADS) * HEAD_DIM * size
    return [
        (
            "rms_norm+residual",
            f"T={t} H={HIDDEN}",
            lambda: triton_ops.rms_norm(x, weight, 1e-5, residual),
            4 * t * HIDDEN * size,
        ),
        (
            "rms_norm",
            f"T={t} H={HIDDEN}",
            lambda: triton_ops.rms_norm(x, weight, 1e-5),
            2 * t * HIDDEN * size,
        ),
        (
            "rotary_embedding",
            f"T={t} Hq={NUM_HEADS} Hkv={NUM_KV_HEADS} D={HEAD_DIM}",
            lambda: triton_ops.rotary_embedding(positions, q, k, cos_sin, HEAD_DIM),
            2 * qk_bytes + t * HEAD_DIM * 4,
        ),
        (
            "silu_and_mul",
            f"T={t} I={INTERMEDIATE}",
            lambda: triton_ops.silu_and_mul(gate_up),
            3 * t * INTERMEDIATE * size,
        ),
        (
            "write_kv",
            f"T={t} Hkv={NUM_KV_HEADS} D={HEAD_DIM}",
            lambda: triton_ops.write_kv(kv_heads, kv_heads, k_cache, v_cache, slots),
            4 * t * NUM_KV_HEADS * HEAD_DIM * size,
        ),
    ]


def _decode_case(batch: int, context: int, dtype: torch.dtype):
    k_cache, v_cache, tables = _paged_cache(batch, context, dtype)
    q = torch.randn(batch, NUM_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    size = torch.finfo(dtype).bits // 8
    kv_bytes = 2 * batch * context * NUM_KV_HEADS * HEAD_DIM * size
    fn = lambda: triton_ops.paged_decode_attention(q, k_cache, v_cache, tables, seq_lens, HEAD_DIM**-0.5)
    return fn, kv_bytes + 2 * q.numel() * size


def _prefill_case(num_seqs: int, new_tokens: int, cached: int, dtype: torch.dtype):
    """num_seqs sequences each prefilling new_tokens after `cached` already-cached tokens."""
    k_cache, v_cache, tables = _paged_cache(num_seqs, cached + new_tokens, dtype)
    q = torch.randn(num_seqs * new_tokens, NUM_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    starts = torch.arange(0, num_seqs + 1, device="cuda", dtype=torch.int32) * new_tokens
    seq_lens = torch.full((num_seqs,), cached + new_tokens, device="cuda", dtype=torch.int32)
    # query i (0-based in its chunk) sees cached + i + 1 keys; QK^T and PV are 2 * D FLOPs per pair each
    pairs = num_seqs * (cached * new_tokens + new_tokens * (new_tokens + 1) // 2)
    fn = lambda: triton_ops.paged_prefill_attention(
        q, k_cache, v_cache, tables, starts, seq_lens, HEAD_DIM**-0.5
    )
    return fn, 4 * HEAD_DIM * NUM_HEADS * pairs


def run_kernel_bench(dtype_name: str = "bf16") -> dict[str, Any]:
    """Time every kernel; returns the JSON-ready result (device, ceilings, one row per kernel/shape)."""
    if not torch.cuda.is_available():
        raise KernelBenchError("llmbench kernels needs a CUDA GPU; none is visible to torch")
    if dtype_name not in DTYPES:
        raise KernelBenchError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype_name!r}")
    dtype = DTYPES[dtype_name]
    torch.manual_seed(0)
    ceilings = measure_ceilings(dtype)
    logger.info(
        "ceilings: copy %.0f GB/s, GEMM %.0f TFLOP/s",
        ceilings["copy_gb_per_s"],
        ceilings["gemm_tflop_per_s"],
    )
    rows: list[KernelTiming] = []

    def time_kernel(kernel: str, shape: str, fn: Callable[[], Any], work: float, bound: str, target=None):
        ms = _median_ms(fn)
        # work is bytes (memory-bound: GB/s) or FLOPs (compute-bound: TFLOP/s)
        achieved = work / ms / (1e6 if bound == "memory" else 1e9)
        ceiling = ceilings["copy_gb_per_s" if bound == "memory" else "gemm_tflop_per_s"]
        rows.append(KernelTiming(kernel, shape, ms * 1e3, bound, achieved, achieved / ceiling, target))
        logger.info("%s %s: %.1f us, %.0f%% of ceiling", kernel, shape, ms * 1e3, 100 * achieved / ceiling)

    for kernel, shape, fn, nbytes in _elementwise_cases(dtype):
        time_kernel(kernel, shape, fn, nbytes, "memory")
    for batch, context in [(64, 2048), (1, 2048), (1, 32768), (16, 8192), (256, 1024)]:
        fn, nbytes = _decode_case(batch, context, dtype)
        target = DECODE_TARGET if (batch, context) == (64, 2048) else None
        time_kernel("paged_decode_attention", f"B={batch} ctx={context}", fn, nbytes, "memory", target)
    for num_seqs, new_tokens, cached in [(4, 2048, 0), (8, 512, 1536), (1, 8192, 0)]:
        fn, flops = _prefill_case(num_seqs, new_tokens, cached, dtype)
        shape = f"B={num_seqs} new={new_tokens} cached={cached}"
        time_kernel("paged_prefill_attention", shape, fn, flops, "compute")
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": _triton_version(),
        "dtype": dtype_name,
        "model_shape": "Llama-3-8B (hidden 4096, intermediate 14336, 32 q heads, 8 KV heads, head dim 128)",
        "block_size": BLOCK_SIZE,
        "ceilings": ceilings,
        "kernels": [asdict(r) for r in rows],
    }


def _triton_version() -> str:
    import triton

    return triton.__version__


def result_table(result: dict[str, Any]) -> Table:
    """The result as a terminal table: time, achieved rate, and fraction of the measured ceiling."""
    ceilings = result["ceilings"]
    table = Table(
        title=f"{result['device']} ({result['dtype']}): copy {ceilings['copy_gb_per_s']:.0f} GB/s, "
        f"GEMM {ceilings['gemm_tflop_per_s']:.0f} TFLOP/s"
    )
    for column in ("kernel", "shape", "median us", "achieved", "of ceiling", "target"):
        table.add_column(column, justify="left" if column in ("kernel", "shape") else "right")
    for row in result["kernels"]:
        unit = "GB/s" if row["bound"] == "memory" else "TFLOP/s"
        target = row["target"]
        verdict = "met" if target is not None and row["fraction_of_ceiling"] >= target else "MISSED"
        table.add_row(
            row["kernel"],
            row["shape"],
            f"{row['median_us']:.1f}",
            f"{row['achieved']:.0f} {unit}",
            f"{row['fraction_of_ceiling']:.0%}",
            "" if target is None else f"{target:.0%} {verdict}",
        )
    return table
