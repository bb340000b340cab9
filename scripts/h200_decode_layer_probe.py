"""Where a 256-row decode step's kernels lose time, timed as the engine runs them: 32 layers' calls in one
CUDA graph (each layer its own weights or KV cache, so nothing is served from L2), the graph's replay
timed with CUDA events, median of 20 after 3 warm-up replays, divided by 32.

- Decode attention at 256 sequences over contexts of 256-512 tokens, with the default launch and
  variants (tile width, warps, stages, dependent launch off): `llmbench kernels` times one call a
  replay, which adds the graph launch, and it fits time = fixed + slope x context with a fixed part
  of ~20 us. Is that part the kernel's?
- The gate-up product at 192 and 256 rows, whole (N=28672) and split into products of whole waves of
  cuBLAS's 256x128 tile plus a remainder, as separate weight matrices (results/h200/gemm_waves.json:
  the whole product runs at 89% of the rate a whole wave reaches).

    python scripts/h200_decode_layer_probe.py results/h200/decode_layer_probe.json

With --sweep, decode attention alone in its two launches (the default tile, and the small tile it takes
for grids of many programs) over batch sizes and contexts, split contexts among them: where the small
tile starts to pay (kernels/attention.py MANY_PROGRAMS_PER_SM):

    python scripts/h200_decode_layer_probe.py --sweep results/h200/decode_launch_choice.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import torch
from llmbench.kernels import attention, pdl

from llmbench.env import command_line
from llmbench.kernel_bench import capture_graph, measure_ceilings

LAYERS, KV_HEADS, GROUP, HEAD_DIM, BLOCK_SIZE, TABLE_WIDTH = 32, 8, 4, 128, 16, 256
HIDDEN, GATE_UP = 4096, 28672
SHAPES = [(256, ctx) for ctx in (256, 384, 512)]  # (sequences, context)
SWEEP_SHAPES = [(b, ctx) for b in (64, 128, 192, 256) for ctx in (256, 1024)] + [(16, 8192), (1, 2048)]
# Each variant forces one of the kernel's two launches (the default tile, or the small tile the kernel
# takes for many programs), with tile overrides and dependent launch on or off. At 7f3f785, which wrote
# decode_layer_probe.json, the grid order was a switch too ("heads fastest"); it is the only order now.
ATTENTION_VARIANTS = {
    "default tile": {"many": False},
    "default tile, pdl off": {"many": False, "pdl": False},
    "block_n 32, 2 warps, 2 stages": {"many": True},
    "block_n 16, 2 warps, 2 stages": {"many": True, "block_n": 16},
    "block_n 32, 4 warps, 4 stages": {"many": True, "num_warps": 4, "num_stages": 4},
}
SWEEP_VARIANTS = {
    name: ATTENTION_VARIANTS[name] for name in ("default tile", "block_n 32, 2 warps, 2 stages")
}
GATE_UP_SPLITS = {
    "whole": (28672,),
    "16896 + 11776": (16896, 11776),
    "14336 x 2": (14336, 14336),
    "16896 + 8448 + 3328": (16896, 8448, 3328),
    "11776 + 16896": (11776, 16896),
}


def graph_us_per_layer(calls) -> float:
    graph = capture_graph(calls)
    times = []
    for i in range(23):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) * 1e3)
    del graph
    return statistics.median(times) / len(calls)


def attention_rows(copy_gb_per_s: float, shapes: list, variants: dict) -> list[dict]:
    rows = []
    many_launch, many_per_sm = dict(attention.DECODE_LAUNCH_MANY), attention.MANY_PROGRAMS_PER_SM
    for batch, ctx in shapes:
        width = max(TABLE_WIDTH, ctx // BLOCK_SIZE)
        blocks_per_seq = ctx // BLOCK_SIZE
        num_blocks = batch * blocks_per_seq
        layers = []
        for _ in range(LAYERS):
            cache = [
                torch.randn(num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                for _ in range(2)
            ]
            tables = torch.zeros(batch, width, dtype=torch.int32, device="cuda")
            tables[:, :blocks_per_seq] = torch.randperm(num_blocks, device="cuda").view(batch, -1).int()
            q = torch.randn(batch, KV_HEADS * GROUP, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            layers.append((q, *cache, tables, torch.empty_like(q)))
        seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
        num_bytes = 2 * batch * ctx * KV_HEADS * HEAD_DIM * 2 + 2 * batch * KV_HEADS * GROUP * HEAD_DIM * 2
        for name, variant in variants.items():
            attention.MANY_PROGRAMS_PER_SM = 0 if variant["many"] else math.inf
            attention.DECODE_LAUNCH_MANY.update(many_launch)
            attention.DECODE_LAUNCH_MANY.update(
                {k: v for k, v in variant.items() if k not in ("many", "pdl")}
            )
            pdl.set_enabled(variant.get("pdl", True))
            calls = [
                (
                    lambda q=q, k=k, v=v, t=t, o=o, lens=seq_lens: attention.paged_decode_attention(
                        q, k, v, t, lens, HEAD_DIM**-0.5, out=o
                    )
                )
                for q, k, v, t, o in layers
            ]
            us = graph_us_per_layer(calls)
            row = {"batch": batch, "ctx": ctx, "variant": name, "us": us, "gb_per_s": num_bytes / us / 1e3}
            row["fraction_of_copy"] = row["gb_per_s"] / copy_gb_per_s
            rows.append(row)
            print(json.dumps(row), flush=True)
        del layers
        torch.cuda.empty_cache()
    attention.MANY_PROGRAMS_PER_SM = many_per_sm
    attention.DECODE_LAUNCH_MANY.update(many_launch)
    pdl.set_enabled(True)
    return rows


def gate_up_rows(gemm_tflop_per_s: float) -> list[dict]:
    weights = [torch.randn(GATE_UP, HIDDEN, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
    rows = []
    for m in (256, 192):
        x = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        for name, widths in GATE_UP_SPLITS.items():
            parts = [list(w.split(widths)) for w in weights]
            parts = [[p.contiguous() for p in layer] for layer in parts]  # separate matrices, as stored
            outs = [torch.empty(m, width, device="cuda", dtype=torch.bfloat16) for width in widths]

            def layer_call(layer, x=x, outs=outs):
                for part, out in zip(layer, outs, strict=True):
                    torch.matmul(x, part.t(), out=out)

            calls = [lambda layer=layer: layer_call(layer) for layer in parts]
            us = graph_us_per_layer(calls)
            tflops = 2 * m * GATE_UP * HIDDEN / us / 1e6
            row = {"m": m, "split": name, "us": us, "tflop_per_s": tflops}
            row["fraction_of_gemm_ceiling"] = tflops / gemm_tflop_per_s
            rows.append(row)
            print(json.dumps(row), flush=True)
            del parts
            torch.cuda.empty_cache()
    return rows


def main(out: Path, sweep: bool) -> None:
    ceilings = measure_ceilings(torch.bfloat16)
    print(json.dumps(ceilings), flush=True)
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"torch": torch.__version__, "ceilings": ceilings, "layers": LAYERS}
    if sweep:
        result["attention"] = attention_rows(ceilings["copy_gb_per_s"], SWEEP_SHAPES, SWEEP_VARIANTS)
    else:
        result["attention"] = attention_rows(ceilings["copy_gb_per_s"], SHAPES, ATTENTION_VARIANTS)
        result["gate_up"] = gate_up_rows(ceilings["gemm_tflop_per_s"])
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[-1]), "--sweep" in sys.argv[1:-1])
