"""The ceilings a run's roofline bound is judged against, measured on the device the run uses at its
start: a dense GEMM's FLOP rate and a device-to-device copy's bandwidth, each the median of several
timed repeats after a warm-up (CUDA events on a GPU, perf_counter on the CPU). About 0.3 s on an H200,
0.1 s on a CPU. On the CPU the figures are the host's own (torch's threads, the model's dtype): a
tiny model's run is host-bound, so its fraction of the bound shows how far the engine's Python is
from the machine, not a GPU's efficiency. On an NVIDIA GPU the GEMM's SM clock is recorded with it, and
the run's over its timed trials (llmbench/device/clocks.py): under the board's power cap a GEMM ceiling
taken at 1,500 MHz and a decode step run at 1,900 are not the same machine."""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from llmbench.config.schema import RunConfig
from llmbench.device.clocks import ClockSampler, ClockSummary, device_sampler
from llmbench.device.nvml import NvmlUnavailable, open_reader
from llmbench.engine.loading.model_facts import resolve_model_facts

logger = logging.getLogger(__name__)

# (GEMM side, copy MiB, warm-up calls, timed calls): the GPU's sizes saturate an H200 (a 1 GiB copy is
# far past its L2) and its warm-up is ~0.15 s of GEMMs, for the clocks to settle under load; the
# CPU's keep a tiny-model run's start near 0.1 s with the copy still past most L2 caches
SIZES = {"cuda": (8192, 1024, 100, 20), "cpu": (512, 64, 2, 5)}
RUN_CLOCK_INTERVAL_S = 0.02  # a minute's run: 3,000 samples
CEILING_CLOCK_INTERVAL_S = 0.001  # the GEMM's timed calls take ~35 ms on an H200


@dataclass(frozen=True)
class Ceilings:
    """What the device the run uses can do at most, as summary.json's steps hold it (ceiling_* and
    ceilings_*)."""

    gemm_flops_per_s: float
    copy_bytes_per_s: float  # bytes read + written
    device: str
    dtype: str  # the dtype the GEMM and the copy ran in
    method: str
    ms: float  # how long measuring took
    gemm_clock: ClockSummary | None = None  # the SM clock over the GEMM's timing; None: no NVML
    devices: int = 1  # tensor-parallel ranks, each with its own device


def measure_ceilings(
    device: torch.device, dtype: torch.dtype, clocks: ClockSampler | None = None
) -> Ceilings:
    """Peak FLOP/s of an n x n x n matmul in `dtype` and copy bandwidth in bytes/s, counting the bytes
    read and the bytes written (2 per byte copied), as STREAM's copy does; with `clocks`, the SM clock
    over the GEMM's timing."""
    n, copy_mib, warmup, repeats = SIZES[device.type]
    start = time.perf_counter()
    fine = ClockSampler(clocks.read, CEILING_CLOCK_INTERVAL_S) if clocks is not None else None
    gemm_s = _gemm_seconds(n, dtype, device, warmup, repeats, fine)
    gemm_clock = fine.take() if fine is not None else None
    copy_s = copy_seconds(copy_mib * 2**20, device, warmup, repeats)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()  # the engine's allocator gets the memory back
    threads = torch.get_num_threads()
    name = torch.cuda.get_device_name(device) if cuda else f"CPU, {threads} thread{'s' * (threads > 1)}"
    timer = "CUDA events" if cuda else "perf_counter"
    dtype_name = str(dtype).removeprefix("torch.")
    return Ceilings(
        gemm_flops_per_s=2 * n**3 / gemm_s,
        copy_bytes_per_s=2 * copy_mib * 2**20 / copy_s,
        device=name,
        dtype=dtype_name,
        method=f"{n}x{n}x{n} {dtype_name} matmul and a {copy_mib} MiB copy (bytes read + written), "
        f"{timer}, median of {repeats} after {warmup} warm-up calls",
        ms=(time.perf_counter() - start) * 1e3,
        gemm_clock=gemm_clock,
    )


def _no_local_model(config: RunConfig) -> str | None:
    """Why no engine step log of a model on this machine's run device comes back, or None: the bound
    needs the steps of a real model and ceilings measured on its device, so the bundled engine or our
    server started for the run (its steps come back over HTTP; the ceilings are measured here, on the
    same device, while the server is idle)."""
    if config.backend.type not in ("bundled", "server"):
        return f"backend.type {config.backend.type}: no engine step log"
    if config.model.executor == "null":
        return "model.executor null: no model runs, so its roofline does not apply"
    return None


def _no_local_gpu(config: RunConfig) -> str | None:
    """Why the run's model runs on no NVIDIA GPU of this machine, or None: the bundled engine, our
    server started for the run and the hf backend run it here; an openai URL's server may be anywhere."""
    if config.backend.type == "openai":
        return "backend.type openai: the model runs behind a URL, not on a GPU of this machine"
    if config.model.executor == "null":
        return "model.executor null: no model runs on a GPU"
    device = resolve_model_facts(config.engine).device
    return None if device.type == "cuda" else f"the model runs on the {device.type}, not an NVIDIA GPU"


def run_clock_sampler(config: RunConfig) -> ClockSampler | None:
    """A sampler of the GPU the run's model runs on (clock, power, energy), or None (a server behind a
    URL may be elsewhere; a CPU or a device without NVML has nothing to read)."""
    if _no_local_gpu(config):
        return None
    return device_sampler(resolve_model_facts(config.engine).device, RUN_CLOCK_INTERVAL_S)


def why_no_gpu_samples(config: RunConfig) -> str:
    """Why run_clock_sampler gave none, for the summary's null power keys."""
    reason = _no_local_gpu(config)
    if reason:
        return reason
    try:
        open_reader(resolve_model_facts(config.engine).device)
    except NvmlUnavailable as e:
        return str(e)
    return "no GPU sample was taken"


def run_ceilings(config: RunConfig, clocks: ClockSampler | None = None) -> Ceilings | str:
    """The ceilings for a run's summary, or why it has no bound (its `bound_unavailable`): the bound
    needs an engine step log (bundled, or our server's) and a model that really runs. `clocks`:
    run_clock_sampler's."""
    reason = _no_local_model(config)
    if reason:
        return reason
    facts = resolve_model_facts(config.engine)
    try:
        ceilings = measure_ceilings(facts.device, facts.dtype, clocks)
    except torch.cuda.OutOfMemoryError as e:
        return f"ceilings not measured: out of device memory ({str(e)[:80]})"
    logger.info(
        "ceilings on %s: GEMM %.1f TFLOP/s, copy %.0f GB/s (%.0f ms)",
        ceilings.device,
        ceilings.gemm_flops_per_s / 1e12,
        ceilings.copy_bytes_per_s / 1e9,
        ceilings.ms,
    )
    return dataclasses.replace(ceilings, devices=config.engine.tensor_parallel_size)


def _gemm_seconds(
    n: int, dtype: torch.dtype, device: torch.device, warmup: int, repeats: int, clocks: ClockSampler | None
) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return median_seconds(lambda: torch.mm(a, b), device, warmup, repeats, clocks)


def copy_seconds(nbytes: int, device: torch.device, warmup: int, repeats: int) -> float:
    """Median seconds of one device-to-device copy of nbytes (also `llmbench env --bandwidth`'s figure)."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return median_seconds(lambda: dst.copy_(src), device, warmup, repeats)


def median_seconds(
    fn: Callable[[], object],
    device: torch.device,
    warmup: int,
    repeats: int,
    clocks: ClockSampler | None = None,
) -> float:
    """Median seconds of fn() after warm-up calls: CUDA events around each call on a GPU, back to back
    (the launches queue as in a run), the host clock elsewhere. `clocks` samples the timed calls only:
    the warm-up ends (synchronized) before it starts."""
    for _ in range(warmup):  # clocks up, kernels chosen, pages touched
        fn()
    if clocks is None:
        return _timed_median(fn, device, repeats)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the warm-up has run before the sampling starts
    with clocks:
        return _timed_median(fn, device, repeats)


def _timed_median(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) for start, end in events) / 1e3
