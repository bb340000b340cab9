"""`llmbench kernels`: time each Triton kernel at Llama-3-8B shapes against ceilings measured in the
same run (a device-to-device copy for bandwidth, a large bf16 GEMM for FLOP rate).

A timing is the median of many CUDA-event-timed replays after warm-up (triton.testing.do_bench, which
flushes L2 before each). Each replay is a CUDA graph running the kernel over several independent input
sets, enough to overflow L2, so that small shapes measure neither the host's launch cost nor the cache.
Beside each timing (and the ceilings) stands the SM clock it ran at and what held the clock down, a
power cap most often (llmbench/device/clocks.py): compute-bound figures move with it."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import triton
from rich.table import Table
from triton.testing import do_bench

from llmbench.device.clocks import ClockSampler, clock_reading, describe, device_sampler
from llmbench.kernelbench.cases import (
    BLOCK_SIZE,
    DECODE_ROWS,
    ELEMENTWISE_TOKENS,
    PREFILL_ROWS,
    Case,
    argmax_cases,
    decode_case,
    elementwise_cases,
    gemv_cases,
    linear_cases,
    prefill_case,
)
from llmbench.kernelbench.sdpa_cases import sdpa_cases

logger = logging.getLogger(__name__)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MAX_INPUT_SETS = 64


class KernelBenchError(RuntimeError):
    """The benchmark cannot run here (no GPU, unknown dtype)."""


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
    clock: dict | None = None  # the SM clock over the timing (device/clocks.py ClockSummary); None: no NVML


def _median_ms(fn: Callable[[], Any], warmup_ms: int = 50) -> float:
    return do_bench(fn, warmup=warmup_ms, rep=300, return_mode="median")


def measure_ceilings(dtype: torch.dtype, sampler: ClockSampler | None = None) -> dict[str, Any]:
    """Copy bandwidth (bytes read + written per second) and dense GEMM rate on random data, with the
    SM clock during the GEMM's timing when a sampler is given."""
    src = torch.randn(2**28, device="cuda", dtype=dtype)
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src))
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    _median_ms(lambda: a @ b, warmup_ms=500)  # half a second of GEMMs: the clock settles under load
    with sampler or contextlib.nullcontext():
        gemm_ms = _median_ms(lambda: a @ b)
    ceilings = {
        "copy_gb_per_s": 2 * src.numel() * src.element_size() / copy_ms / 1e6,
        "gemm_tflop_per_s": 2 * n**3 / gemm_ms / 1e9,
    }
    if sampler is not None:
        ceilings["gemm_clock"] = clock_reading(sampler)
    return ceilings


def sampler_and_ceilings(dtype: torch.dtype) -> tuple[ClockSampler | None, dict[str, Any]]:
    """How a session of kernel timings begins (`llmbench kernels`, the H200 probe scripts): torch
    seeded, a sampler of the SM clock where NVML can read it, and the ceilings measured with it."""
    torch.manual_seed(0)
    sampler = device_sampler(torch.device("cuda"))
    return sampler, measure_ceilings(dtype, sampler)


def time_case(case: Case, sampler: ClockSampler | None = None) -> tuple[float, int]:
    """(median microseconds per call, input sets rotated); the sampler, when given, runs over the
    timed replays only (not the inputs' creation or the capture, when the device idles)."""
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    sets = min(MAX_INPUT_SETS, max(1, math.ceil(3 * l2_bytes / case.footprint)))
    graph = capture_graph([case.make() for _ in range(sets)])
    with sampler or contextlib.nullcontext():
        ms = _median_ms(graph.replay)
    return ms * 1e3 / sets, sets


def capture_graph(calls: list[Callable[[], Any]]) -> torch.cuda.CUDAGraph:
    """One CUDA graph running the calls in order, each run once before the capture (compiles and warms
    up outside it)."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph


def all_cases(dtype: torch.dtype) -> list[Case]:
    # (256, 384): the throughput workload's decode batch near its end (256-token prompts, 128 outputs)
    decodes = [(64, 2048), (1, 2048), (1, 32768), (16, 8192), (32, 2048), (256, 1024), (256, 384)]
    prefills = [(4, 2048, 0), (8, 512, 1536), (1, 8192, 0)]
    return (
        [case for t in ELEMENTWISE_TOKENS for case in elementwise_cases(t, dtype)]
        + [decode_case(b, c, dtype) for b, c in decodes]
        + [prefill_case(b, n, c, dtype) for b, n, c in prefills]
        + sdpa_cases(dtype, prefills)
        + gemv_cases(dtype)
        + linear_cases(DECODE_ROWS, dtype)
        + linear_cases(PREFILL_ROWS, dtype)
        + argmax_cases(dtype)
    )


def run_kernel_bench(dtype_name: str = "bf16") -> dict[str, Any]:
    """Time every kernel; returns the JSON-ready result (device, ceilings, one row per kernel/shape)."""
    if not torch.cuda.is_available():
        raise KernelBenchError("llmbench kernels needs a CUDA GPU; none is visible to torch")
    if dtype_name not in DTYPES:
        raise KernelBenchError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype_name!r}")
    dtype = DTYPES[dtype_name]
    sampler, ceilings = sampler_and_ceilings(dtype)
    copy, gemm, clock = ceilings["copy_gb_per_s"], ceilings["gemm_tflop_per_s"], ceilings.get("gemm_clock")
    logger.info("ceilings: copy %.0f GB/s, GEMM %.0f TFLOP/s (%s)", copy, gemm, describe(clock))
    rows = []
    for case in all_cases(dtype):
        try:
            us, sets = time_case(case, sampler)
        except RuntimeError as e:
            if not case.optional:
                raise
            logger.warning("%s %s left out: %s", case.kernel, case.shape, str(e).splitlines()[0])
            torch.cuda.empty_cache()
            continue
        achieved = case.work / us / (1e3 if case.bound == "memory" else 1e6)
        ceiling = ceilings["copy_gb_per_s" if case.bound == "memory" else "gemm_tflop_per_s"]
        fraction = achieved / ceiling
        clock = clock_reading(sampler)
        timing = KernelTiming(
            case.kernel, case.shape, us, case.bound, achieved, fraction, sets, case.target, clock
        )
        rows.append(timing)
        logger.info(
            "%s %s: %.1f us, %.0f%% of ceiling (%s)",
            *(case.kernel, case.shape, us, 100 * fraction, describe(clock)),
        )
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
    """The result as a terminal table: time, achieved rate, fraction of the measured ceiling, and the SM
    clock each timing ran at (with what held it down)."""
    ceilings = result["ceilings"]
    gemm_clock = describe(ceilings.get("gemm_clock"))
    table = Table(
        title=f"{result['device']} ({result['dtype']}): copy {ceilings['copy_gb_per_s']:.0f} GB/s, "
        f"GEMM {ceilings['gemm_tflop_per_s']:.0f} TFLOP/s" + (f" at {gemm_clock}" if gemm_clock else "")
    )
    for column in ("kernel", "shape", "median us", "achieved", "of ceiling", "target", "SM clock"):
        table.add_column(column, justify="left" if column in ("kernel", "shape", "SM clock") else "right")
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
            describe(row.get("clock")),
        )
    return table
