"""Launch configurations of the one-row GEMV on each Llama matmul shape, with and without programmatic
dependent launch, against cuBLAS: the data behind kernels/gemv.py's launch_config.

    python scripts/h200_gemv_sweep.py --out results/h200/gemv_sweep.json

Each figure is the median time per call of one CUDA graph that runs the matmul over rotated copies of its
weight (no L2 reuse), back to back as a decode runs its layers, so a dependent launch can overlap one call's
tail with the next call's first weight loads."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from h200_decode import L2_FLUSH_BYTES, rel_err, timed_per_weight
from llmbench.engine.models.shape import PRESETS
from llmbench.kernels import pdl, triton_ops
from llmbench.kernels.gemv import gemv, launch_config

# (BLOCK_N, BLOCK_K): about 4-16k weight elements in flight per program
TILES = [(4, 1024), (8, 512), (8, 1024), (16, 256), (16, 512), (32, 128), (32, 256)]
WARPS = [4, 8]


def sweep_shape(name: str, n: int, k: int, gated: bool) -> dict:
    copies = max(2, math.ceil(L2_FLUSH_BYTES / (2 * n * k)))
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    want = x.float() @ weights[0].float().t()
    want = triton_ops.silu_and_mul(want) if gated else want

    def cublas(w):
        out = torch.matmul(x, w.t())
        return triton_ops.silu_and_mul(out) if gated else out

    row = {"matmul": name, "n": n, "k": k, "weight_mb": 2 * n * k / 1e6}
    row["cublas_us"] = timed_per_weight(cublas, weights)
    row["default_launch"] = launch_config(1, k)
    configs = []
    for block_n, block_k in TILES:
        for warps in WARPS:
            launch = (block_n, min(block_k, k), warps)
            try:
                error = rel_err(gemv(x, weights[0], gated=gated, launch=launch), want)
                us = timed_per_weight(
                    lambda w, launch=launch: gemv(x, w, gated=gated, launch=launch), weights
                )
            except Exception as e:  # noqa: BLE001 - one config that fails to compile is a data point
                configs.append({"launch": launch, "error": repr(e)[:200]})
                continue
            configs.append({"launch": launch, "us": us, "gb_per_s": 2 * n * k / us / 1e3, "rel_err": error})
    row["configs"] = sorted(configs, key=lambda c: c.get("us", math.inf))
    del weights
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="llama3-8b")
    parser.add_argument("--no-pdl", action="store_true", help="launch every kernel the ordinary way")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.no_pdl:
        pdl.set_enabled(False)
    s = PRESETS[args.preset]
    shapes = [
        ("qkv_proj", s.q_size + 2 * s.kv_size, s.hidden_size, False),
        ("o_proj", s.hidden_size, s.q_size, False),
        ("gate_up_proj+silu", 2 * s.intermediate_size, s.hidden_size, True),
        ("down_proj", s.hidden_size, s.intermediate_size, False),
        ("lm_head", s.vocab_size, s.hidden_size, False),
    ]
    rows = []
    for name, n, k, gated in shapes:
        rows.append(sweep_shape(name, n, k, gated))
        best = rows[-1]["configs"][0]
        print(f"{name:>17} [{n}x{k}]: cuBLAS {rows[-1]['cublas_us']:.1f} us, best GEMV {best}", flush=True)
    result = {
        "command": "python " + " ".join(sys.argv),
        "device": torch.cuda.get_device_name(),
        "pdl": pdl.launch_args(torch.device("cuda"))["PDL"],
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
