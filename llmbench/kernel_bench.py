"""`llmbench kernels`: time each Triton kernel at Llama-3-8B shapes against ceilings measured in the
same run (a device-to-device copy for bandwidth, a large bf16 GEMM for FLOP rate).

A timing is the median of many CUDA-event-timed replays after warm-up (triton.testing.do_bench, which
flushes L2 before each). Each replay is a CUDA graph running the kernel over several independent input
sets, enough to overflow L2, so that small shapes measure neither the host's launch cost nor the cache."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import triton
from rich.table import Table
from triton.testing import do_bench

from kernels import triton_ops

logger = logging.getLogger(__name__)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Llama-3-8B
HIDDEN, INTERMEDIATE, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 4096, 14336, 32, 8, 128, 16
ELEMENTWISE_TOKENS = (4096, 64)  # a prefill-sized and a decode-sized batch
DECODE_TARGET = 0.80  # fraction of copy bandwidth the decode kernel must reach at batch 64, context 2048
MAX_INPUT_SETS = 64


class KernelBenchError(RuntimeError):
    """The benchmark cannot run here (no GPU, unknown dtype)."""


@dataclass
class Case:
    kernel: str
    shape: str
    bound: str  # "memory": judged in GB/s against the copy; "compute": in TFLOP/s against the GEMM
    work: float  # bytes moved (memory) or FLOPs (compute) per call
    footprint: float  # bytes of inputs and outputs per call, to size the input rotation
    make: Callable[[], Callable[[], Any]]  # builds fresh random inputs, returns the call to time
    target: float | None = None


@dataclass
class KernelTiming:
    kernel: str
    shape: str
    median_us: float
    bound: str
    achieved: float  # GB/s or TFLOP/s
    fraction_of_ceiling: float
    input_sets: int
    target: float | None = None


def _median_ms(fn: Callable[[], Any], warmup_ms: int = 50) -> float:
    return do_bench(fn, warmup=warmup_ms, rep=300, return_mode="median")


def measure_ceilings(dtype: torch.dtype) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and dense GEMM rate on random data."""
    src = torch.randn(2**28, device="cuda", dtype=dtype)
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src))
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    gemm_ms = _median_ms(lambda: a @ b, warmup_ms=500)  # long warm-up: let the clocks settle under load
    return {
        "copy_gb_per_s": 2 * src.numel() * src.element_size() / copy_ms / 1e6,
        "gemm_tflop_per_s": 2 * n**3 / gemm_ms / 1e9,
    }


def time_case(case: Case) -> tuple[float, int]:
    """(median microseconds per call, input sets rotated)."""
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    sets = min(MAX_INPUT_SETS, max(1, math.ceil(3 * l2_bytes / case.footprint)))
    calls = [case.make() for _ in range(sets)]
    for call in calls:  # compile and warm up outside the capture
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return _median_ms(graph.replay) * 1e3 / sets, sets


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

    def rope():
        q, k = _randn(t, NUM_HEADS * HEAD_DIM, dtype=dtype), _randn(t, NUM_KV_HEADS * HEAD_DIM, dtype=dtype)
        positions = torch.randint(0, 8192, (t,), device="cuda")
        cos_sin = _randn(8192, HEAD_DIM, dtype=torch.float32)
        return lambda: triton_ops.rotary_embedding(positions, q, k, cos_sin, HEAD_DIM)

    def silu():
        gate_up = _randn(t, 2 * INTERMEDIATE, dtype=dtype)
        return lambda: triton_ops.silu_and_mul(gate_up)

    def write():
        k, v = _randn(t, NUM_KV_HEADS, HEAD_DIM, dtype=dtype), _randn(t, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
        k_cache = _randn(2 * t // BLOCK_SIZE, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, dtype=dtype)
        v_cache = torch.randn_like(k_cache)
        slots = torch.randperm(2 * t, device="cuda")[:t]
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


def all_cases(dtype: torch.dtype) -> list[Case]:
    decodes = [(64, 2048), (1, 2048), (1, 32768), (16, 8192), (32, 2048), (256, 1024)]
    prefills = [(4, 2048, 0), (8, 512, 1536), (1, 8192, 0)]
    return (
        [case for t in ELEMENTWISE_TOKENS for case in elementwise_cases(t, dtype)]
        + [decode_case(b, c, dtype) for b, c in decodes]
        + [prefill_case(b, n, c, dtype) for b, n, c in prefills]
    )


def run_kernel_bench(dtype_name: str = "bf16") -> dict[str, Any]:
    """Time every kernel; returns the JSON-ready result (device, ceilings, one row per kernel/shape)."""
    if not torch.cuda.is_available():
        raise KernelBenchError("llmbench kernels needs a CUDA GPU; none is visible to torch")
    if dtype_name not in DTYPES:
        raise KernelBenchError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype_name!r}")
    dtype = DTYPES[dtype_name]
    torch.manual_seed(0)
    ceilings = measure_ceilings(dtype)
    logger.info("ceilings: copy %.0f GB/s, GEMM %.0f TFLOP/s", *ceilings.values())
    rows = []
    for case in all_cases(dtype):
        us, sets = time_case(case)
        achieved = case.work / us / (1e3 if case.bound == "memory" else 1e6)
        ceiling = ceilings["copy_gb_per_s" if case.bound == "memory" else "gemm_tflop_per_s"]
        fraction = achieved / ceiling
        rows.append(
            KernelTiming(case.kernel, case.shape, us, case.bound, achieved, fraction, sets, case.target)
        )
        logger.info("%s %s: %.1f us, %.0f%% of ceiling", case.kernel, case.shape, us, 100 * fraction)
        torch.cuda.empty_cache()
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "dtype": dtype_name,
        "model_shape": "Llama-3-8B (hidden 4096, intermediate 14336, 32 q heads, 8 KV heads, head dim 128)",
        "block_size": BLOCK_SIZE,
        "ceilings": ceilings,
        "kernels": [asdict(r) for r in rows],
    }


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
