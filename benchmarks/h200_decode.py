"""Batch-1 decode speed against the bandwidth roofline, measured in one process on one GPU.

    python benchmarks/h200_decode.py --out runs/h200/decode_bs1.json

Measures the device-to-device copy bandwidth (the ceiling), each of the model's matmuls at 1-8 rows through
cuBLAS (x @ w.T) and through the engine's Triton GEMV (kernels/gemv.py), then decodes one request through
the bundled engine with CUDA graphs (one and eight scheduler steps, with and without async output) and
eagerly: wall time and GPU time (step CUDA events) per output token, the GPU time of one graph replay, and
the eager kernel breakdown. The roofline step time is the weight bytes over the copy bandwidth.

Takes under 150 s on an H200 (benchmarks/h200_measure.sh's timeout for it). Writes --out FILE; the
published ones are docs/measurements/h200/decode_bs1.json and decode_bs1_no_pdl.json (--no-pdl)."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams
from llmbench.kernels import pdl, triton_ops
from llmbench.kernels.gemv import gemv

L2_FLUSH_BYTES = 256 * 2**20  # input sets are rotated until a pass moves this much: no L2 reuse


def event_ms(fn, repeats: int) -> float:
    """Median milliseconds of fn() over repeats, each timed with CUDA events after a warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbs(size_bytes: int = 2 * 2**30) -> float:
    src = torch.randint(0, 255, (size_bytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = event_ms(lambda: dst.copy_(src), repeats=20)
    return 2 * size_bytes / ms / 1e6  # read + write


def graphed(calls) -> torch.cuda.CUDAGraph:
    """One CUDA graph running every call in order: launch gaps of the host stay out of the timing."""
    calls[0]()  # warm-up: cuBLAS picks its kernel and workspace outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph


def timed_per_weight(calls_for, weights) -> float:
    """Microseconds per call, one graph over rotated weight copies (no L2 reuse between calls)."""
    graph = graphed([lambda w=w: calls_for(w) for w in weights])
    return event_ms(graph.replay, repeats=20) * 1e3 / len(weights)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want).norm() / want.norm()).item()


def gemv_bandwidth(shape) -> list[dict]:
    """Each decode matmul at a few rows: [M, K] x [N, K]^T by cuBLAS and by the Triton GEMV; the gated
    row is the MLP's gate-up matmul plus SiLU-and-mul (two kernels) against the fused GEMV."""
    h, inter = shape.hidden_size, shape.intermediate_size
    rows = []
    for name, n, k in (
        ("qkv_proj", shape.q_size + 2 * shape.kv_size, h),
        ("o_proj", h, shape.q_size),
        ("gate_up_proj+silu", 2 * inter, h),
        ("down_proj", h, inter),
        ("lm_head", shape.vocab_size, h),
    ):
        gated = name.endswith("+silu")
        weight_bytes = 2 * n * k
        copies = max(2, math.ceil(L2_FLUSH_BYTES / weight_bytes))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for m in (1, 2, 4, 8):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            want = x.float() @ weights[0].float().t()
            want = triton_ops.silu_and_mul(want) if gated else want

            def cublas(w, x=x, gated=gated):
                out = torch.matmul(x, w.t())
                return triton_ops.silu_and_mul(out) if gated else out

            cublas_us = timed_per_weight(cublas, weights)
            gemv_us = timed_per_weight(lambda w, x=x, gated=gated: gemv(x, w, gated=gated), weights)
            rows.append(
                {
                    "matmul": name, "m": m, "n": n, "k": k,
                    "cublas_us": cublas_us, "cublas_gb_per_s": weight_bytes / cublas_us / 1e3,
                    "gemv_us": gemv_us, "gemv_gb_per_s": weight_bytes / gemv_us / 1e3,
                    "gemv_rel_err": rel_err(gemv(x, weights[0], gated=gated), want),
                }
            )  # fmt: skip
        del weights
    return rows


def decode_per_token(engine: LLMEngine, prompt: list[int], num_tokens: int) -> tuple[float, float]:
    """(wall, GPU) milliseconds per output token of one request, after its first (prefill) token. GPU
    time is the sum of the steps' CUDA-event spans: wall minus it is time the device sat idle."""
    engine.add_request("bs1", prompt, SamplingParams(max_tokens=num_tokens + 1, ignore_eos=True))
    while not any(out.new_token_ids for out in engine.step()):
        pass
    engine.drain_step_records()
    start = time.perf_counter()
    produced = 0
    while engine.has_unfinished():
        produced += sum(len(out.new_token_ids) for out in engine.step())
    wall_ms = (time.perf_counter() - start) * 1e3
    gpu_ms = sum(r.gpu_ms for r in engine.drain_step_records() if not math.isnan(r.gpu_ms))
    return wall_ms / produced, gpu_ms / produced


def kernel_breakdown(engine: LLMEngine, prompts: list[list[int]], max_tokens: int, skip: int, steps: int):
    """Device time per engine step of each kernel name over `steps` steps after `skip` unprofiled ones
    (eager, where the profiler sees every launch)."""
    from torch.profiler import ProfilerActivity, profile

    for i, prompt in enumerate(prompts):
        engine.add_request(f"profiled-{i}", prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    for _ in range(skip):
        engine.step()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
    while engine.has_unfinished():
        engine.step()
    rows = []
    for event in prof.key_averages():
        # kernels carry self device time; the CPU ops that launched them only inclusive time
        device_us = getattr(event, "self_device_time_total", None) or getattr(
            event, "self_cuda_time_total", 0
        )
        if device_us > 0:
            rows.append({"kernel": event.key[:90], "us_per_step": device_us / steps, "calls": event.count})
    return sorted(rows, key=lambda r: -r["us_per_step"])[:20]


def decode_engine(preset: str, num_scheduler_steps: int, dependent_launch: bool) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=ModelConfig(preset=preset, device="cuda", dtype="bfloat16"),
            max_num_seqs=8,
            max_num_batched_tokens=2048,
            max_model_len=4096,
            kv_cache_memory_gb=4,
            num_scheduler_steps=num_scheduler_steps,
            cuda_graphs=True,
            cuda_graph_sizes=[1, 2, 4, 8],
            attention_backend="triton",
            dependent_launch=dependent_launch,
        )
    )


def smoke_check_gemv() -> str | None:
    """The GEMV on small bf16 inputs before any engine uses it: an error message, or None when right."""
    try:
        for m in (1, 3, 8):
            x = torch.randn(m, 512, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(96, 512, device="cuda", dtype=torch.bfloat16)
            for gated in (False, True):
                want = x.float() @ w.float().t()
                want = triton_ops.silu_and_mul(want) if gated else want
                error = rel_err(gemv(x, w, gated=gated), want)
                if not error < 1e-2:
                    return f"gemv m={m} gated={gated}: relative error {error}"
    except Exception as e:  # noqa: BLE001 - a compile failure must not cost the other measurements
        return repr(e)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="llama3-8b")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--no-pdl", action="store_true", help="launch every kernel the ordinary way")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    pdl.set_enabled(not args.no_pdl)  # the matmul timings too, not only the engines

    copy_gbs = copy_bandwidth_gbs()
    gemv_error = smoke_check_gemv()
    if gemv_error is not None:
        print(f"GEMV FAILED, engine falls back to cuBLAS: {gemv_error}")
        triton_ops.GEMV_MAX_TOKENS = 0
    engine = decode_engine(args.preset, num_scheduler_steps=1, dependent_launch=not args.no_pdl)
    runner = engine.executor
    shape = runner.shape
    prompt = [(i * 7919) % (shape.vocab_size - 10) + 5 for i in range(args.prompt_len)]
    weight_bytes = shape.param_bytes(2)
    # a decode step reads every weight but the embedding table, of which it reads one row
    step_bytes = weight_bytes - shape.vocab_size * shape.hidden_size * 2 * (not shape.tie_word_embeddings)
    graphs = runner.graphs
    decode_per_token(engine, prompt, 16)  # warm-up
    wall, gpu = {}, {}

    def measure(mode: str) -> None:
        wall[mode], gpu[mode] = decode_per_token(engine, prompt, args.tokens)
        print(f"{mode}: {wall[mode]:.3f} ms/token wall, {gpu[mode]:.3f} GPU")

    measure("cuda_graphs")
    engine.config.async_output = True  # read at every step: safe to switch between requests
    measure("cuda_graphs_async")
    engine.config.async_output = False
    runner.graphs = None
    measure("eager")
    runner.graphs = graphs
    # the bucket-1 graph's static buffers still hold the last decode: replay it alone for GPU time
    replay_ms = event_ms(graphs.graphs[1].replay, repeats=50)
    runner.graphs = None
    try:
        breakdown = kernel_breakdown(engine, [prompt], max_tokens=6, skip=1, steps=4)
    except Exception as e:  # a profiler that cannot attach must not cost the measurements
        breakdown = [{"error": str(e)}]
    engine.shutdown()
    # multi-step scheduling: 8 forwards per schedule, the host's per-step work paid once for all 8
    engine = decode_engine(args.preset, num_scheduler_steps=8, dependent_launch=not args.no_pdl)
    decode_per_token(engine, prompt, 16)
    measure("cuda_graphs_8_steps")
    engine.config.async_output = True
    measure("cuda_graphs_8_steps_async")
    engine.shutdown()

    roofline_ms = weight_bytes / copy_gbs / 1e6
    best_mode = min((m for m in wall if m != "eager"), key=wall.get)
    target = max(225.0, 0.85 * 1e3 / roofline_ms)
    result = {
        "command": "python " + " ".join(sys.argv),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "preset": args.preset,
        "prompt_len": args.prompt_len,
        "tokens": args.tokens,
        "copy_gb_per_s": copy_gbs,
        "weight_bytes": weight_bytes,
        "step_bytes_read": step_bytes,
        "roofline_ms_per_token": roofline_ms,
        "target_tokens_per_s": target,
        "gemv_max_tokens": triton_ops.GEMV_MAX_TOKENS,
        "pdl": pdl.launch_args(torch.device("cuda"))["PDL"],
        "gemv_error": gemv_error,
        "wall_ms_per_token": wall,
        "gpu_ms_per_token": gpu,
        "gpu_busy_fraction": {mode: gpu[mode] / wall[mode] for mode in wall},
        "tokens_per_s": {mode: 1e3 / ms for mode, ms in wall.items()},
        "fraction_of_roofline": {mode: roofline_ms / ms for mode, ms in wall.items()},
        "best_mode": best_mode,
        "graph_replay_gpu_ms": replay_ms,
        "graph_replay_gb_per_s": step_bytes / replay_ms / 1e6,
        "meets_target": 1e3 / wall[best_mode] >= target,
        "eager_decode_kernel_breakdown": breakdown,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))  # the engine figures, should the rest time out
    gemv_rows = gemv_bandwidth(shape)
    result["matmuls_cublas_vs_gemv"] = gemv_rows
    args.out.write_text(json.dumps(result, indent=2))
    for row in breakdown[:14]:
        print(row)
    print(f"copy {copy_gbs:.0f} GB/s; roofline {roofline_ms:.2f} ms/token ({1e3 / roofline_ms:.0f} tok/s)")
    for row in gemv_rows:
        print(
            f"  {row['matmul']:>17} m={row['m']} [{row['n']}x{row['k']}]: cuBLAS {row['cublas_us']:6.1f} us "
            f"{row['cublas_gb_per_s']:5.0f} GB/s | GEMV {row['gemv_us']:6.1f} us "
            f"{row['gemv_gb_per_s']:5.0f} GB/s (err {row['gemv_rel_err']:.1e})"
        )
    print(f"graph replay {replay_ms:.3f} ms ({step_bytes / replay_ms / 1e6:.0f} GB/s)")
    for mode, ms in wall.items():
        print(
            f"bs1 decode {mode:>25}: {ms:.3f} ms/token = {1e3 / ms:6.1f} tok/s "
            f"({roofline_ms / ms:.3f} of roofline), GPU {gpu[mode]:.3f} ms/token"
        )
    print(
        f"best {best_mode}: {1e3 / wall[best_mode]:.1f} tok/s, target {target:.0f}: "
        f"{'MET' if result['meets_target'] else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
