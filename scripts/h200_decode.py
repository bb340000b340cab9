"""Batch-1 decode speed against the bandwidth roofline, measured in one process on one GPU.

    python scripts/h200_decode.py --out results/h200/decode_bs1.json

Measures the device-to-device copy bandwidth (the ceiling), the bandwidth each of the model's matmuls
reaches at one row (cuBLAS through F.linear), then decodes one request through the bundled engine with
CUDA graphs and eagerly: wall time per output token, and the GPU time of one graph replay. The roofline
step time is the weight bytes over the copy bandwidth."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.request import SamplingParams

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


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, out_ptr, n, k, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rows[:, None].to(tl.int64) * k + cols[None, :], mask=rows[:, None] < n, other=0.0)
        acc += w.to(tl.float32) * tl.load(x_ptr + cols).to(tl.float32)[None, :]
    tl.store(out_ptr + rows, tl.sum(acc, 1).to(out_ptr.dtype.element_ty), mask=rows < n)


# a plain Triton GEMV in a few launch configurations (block_n, block_k, warps): does cuBLAS leave bandwidth?
TRITON_GEMV_CONFIGS = ((8, 512, 4), (16, 256, 4), (16, 512, 8), (32, 256, 8), (4, 1024, 4))


def triton_gemv(x, w, out, block_n, block_k, warps):
    n, k = w.shape
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, w, out, n, k, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps
    )


def gemv_bandwidth(shape) -> list[dict]:
    """Each decode matmul at batch 1: [1, K] x [N, K]^T, timed over rotated weight copies."""
    h, inter = shape.hidden_size, shape.intermediate_size
    rows = []
    for name, n, k in (
        ("qkv_proj", shape.q_size + 2 * shape.kv_size, h),
        ("o_proj", h, shape.q_size),
        ("gate_up_proj", 2 * inter, h),
        ("down_proj", h, inter),
        ("lm_head", shape.vocab_size, h),
    ):
        weight_bytes = 2 * n * k
        copies = max(2, math.ceil(L2_FLUSH_BYTES / weight_bytes))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        graph = graphed([lambda w=w, x=x, out=out: torch.matmul(x, w.t(), out=out) for w in weights])
        us = event_ms(graph.replay, repeats=20) * 1e3 / copies
        row = {"matmul": name, "n": n, "k": k, "us": us, "gb_per_s": weight_bytes / us / 1e3}
        reference = torch.matmul(x, weights[0].t()).float()
        for config in TRITON_GEMV_CONFIGS:
            check = torch.full_like(out, float("nan"))
            triton_gemv(x, weights[0], check, *config)
            error = ((check.float() - reference).norm() / reference.norm()).item()
            graph = graphed([lambda w=w, x=x, out=out, c=config: triton_gemv(x, w, out, *c) for w in weights])
            triton_us = event_ms(graph.replay, repeats=20) * 1e3 / copies
            row[f"triton_{config}"] = {
                "us": triton_us,
                "gb_per_s": weight_bytes / triton_us / 1e3,
                "rel_err": error,
            }
        rows.append(row)
        del weights
    return rows


def decode_ms_per_token(engine: LLMEngine, prompt: list[int], num_tokens: int) -> float:
    """Wall milliseconds per output token of one request, after its first (prefill) token."""
    engine.add_request("bs1", prompt, SamplingParams(max_tokens=num_tokens + 1, ignore_eos=True))
    while not any(out.new_token_ids for out in engine.step()):
        pass
    start = time.perf_counter()
    produced = 0
    while engine.has_unfinished():
        produced += sum(len(out.new_token_ids) for out in engine.step())
    return (time.perf_counter() - start) * 1e3 / produced


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


def decode_engine(preset: str, num_scheduler_steps: int) -> LLMEngine:
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
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="llama3-8b")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    copy_gbs = copy_bandwidth_gbs()
    engine = decode_engine(args.preset, num_scheduler_steps=1)
    runner = engine.executor
    shape = runner.shape
    prompt = [(i * 7919) % (shape.vocab_size - 10) + 5 for i in range(args.prompt_len)]
    weight_bytes = shape.param_bytes(2)
    # a decode step reads every weight but the embedding table, of which it reads one row
    step_bytes = weight_bytes - shape.vocab_size * shape.hidden_size * 2 * (not shape.tie_word_embeddings)
    graphs = runner.graphs
    decode_ms_per_token(engine, prompt, 16)  # warm-up
    wall = {}
    for mode in ("cuda_graphs", "eager"):
        runner.graphs = graphs if mode == "cuda_graphs" else None
        wall[mode] = decode_ms_per_token(engine, prompt, args.tokens)
    runner.graphs = graphs
    # the bucket-1 graph's static buffers still hold the last decode: replay it alone for GPU time
    replay_ms = event_ms(graphs.graphs[1].replay, repeats=50)
    gemv = gemv_bandwidth(shape)
    runner.graphs = None
    try:
        breakdown = kernel_breakdown(engine, [prompt], max_tokens=6, skip=1, steps=4)
        prefill_prompts = [[(i * 31 + j) % 100000 + 5 for j in range(256)] for i in range(8)]
        prefill_breakdown = kernel_breakdown(engine, prefill_prompts, max_tokens=2, skip=0, steps=1)
    except Exception as e:  # a profiler that cannot attach must not cost the measurements
        breakdown = prefill_breakdown = [{"error": str(e)}]
    runner.graphs = graphs
    engine.shutdown()
    # multi-step scheduling: 8 forwards per schedule, the host's per-step work paid once for all 8
    engine = decode_engine(args.preset, num_scheduler_steps=8)
    decode_ms_per_token(engine, prompt, 16)
    wall["cuda_graphs_8_steps"] = decode_ms_per_token(engine, prompt, args.tokens)
    engine.shutdown()

    roofline_ms = weight_bytes / copy_gbs / 1e6
    graph_tps = 1e3 / min(wall["cuda_graphs"], wall["cuda_graphs_8_steps"])
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
        "target_tokens_per_s": 0.85 * 1e3 / roofline_ms,
        "wall_ms_per_token": wall,
        "tokens_per_s": {mode: 1e3 / ms for mode, ms in wall.items()},
        "fraction_of_roofline": {mode: roofline_ms / ms for mode, ms in wall.items()},
        "graph_replay_gpu_ms": replay_ms,
        "graph_replay_gb_per_s": step_bytes / replay_ms / 1e6,
        "meets_target": graph_tps >= max(225.0, 0.85 * 1e3 / roofline_ms),
        "gemv_at_batch_1": gemv,
        "eager_decode_kernel_breakdown": breakdown,
        "eager_prefill_kernel_breakdown_8x256": prefill_breakdown,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"copy {copy_gbs:.0f} GB/s; roofline {roofline_ms:.2f} ms/token ({1e3 / roofline_ms:.0f} tok/s)")
    for row in gemv:
        best = max((v for key, v in row.items() if key.startswith("triton")), key=lambda v: v["gb_per_s"])
        print(
            f"  {row['matmul']:>12} [1,{row['k']}]x[{row['k']},{row['n']}]: {row['us']:7.1f} us "
            f"{row['gb_per_s']:6.0f} GB/s; best triton {best['gb_per_s']:6.0f} GB/s "
            f"(err {best['rel_err']:.1e})"
        )
    for row in breakdown[:8] + prefill_breakdown[:8]:
        print(row)
    print(f"graph replay {replay_ms:.2f} ms ({step_bytes / replay_ms / 1e6:.0f} GB/s)")
    for mode, ms in wall.items():
        print(
            f"bs1 decode {mode:>11}: {ms:.2f} ms/token = {1e3 / ms:.1f} tok/s "
            f"({roofline_ms / ms:.2f} of roofline)"
        )


if __name__ == "__main__":
    main()
