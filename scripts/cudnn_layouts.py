"""cuDNN attention on the prefill shapes of `llmbench kernels` in the layouts the engine could hand it:
BSHD views (tokens outermost, what the split op passes), BHSD contiguous (heads outermost), and the
ragged form (packed [T, H, D] with cumulative offsets, one call for prompts of any lengths). For the
ragged form also the first-call cost of a new shape, with the batch and the longest prompt held to
buckets and with them exact: cuDNN builds an execution plan per shape it has not seen.

    python scripts/cudnn_layouts.py --out results/h200/cudnn_layouts.json

Timing: llmbench.ceilings.median_seconds, CUDA events around each call, 10 warm-up calls, the median
of 50 (device/METHOD.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from llmbench.ceilings import median_seconds

HQ, HKV, D = 32, 8, 128


def gpu_us(call) -> float:
    return median_seconds(call, torch.device("cuda"), warmup=10, repeats=50) * 1e6


def flops(lengths: list[int]) -> int:
    return sum(4 * D * HQ * n * (n + 1) // 2 for n in lengths)


def dense_cases(batch: int, length: int) -> dict:
    rand = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    layouts = {
        "BSHD views": (
            rand(batch, length, HQ, D).transpose(1, 2),
            rand(batch, length, HKV, D).transpose(1, 2),
            rand(batch, length, HKV, D).transpose(1, 2),
        ),
        "BHSD contiguous": (
            rand(batch, HQ, length, D),
            rand(batch, HKV, length, D),
            rand(batch, HKV, length, D),
        ),
    }
    out = {}
    for name, (q, k, v) in layouts.items():

        def call(q=q, k=k, v=v):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        us = gpu_us(call)
        out[name] = {"us": us, "tflops": flops([length] * batch) / us / 1e6}
    return out


def ragged(lengths: list[int], max_len: int | None = None, heads_kv: int = HKV):
    """One ragged cuDNN call over packed prompts; max_len > max(lengths) holds the plan's shape to a
    bucket (offsets say where each prompt ends, so the result is the same)."""
    total = sum(lengths)
    q = torch.randn(total, HQ, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(total, heads_kv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(total, heads_kv, D, device="cuda", dtype=torch.bfloat16)
    offsets = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), device="cuda", dtype=torch.int32)
    longest = max_len or max(lengths)

    def call():
        return torch.ops.aten._cudnn_attention_forward(
            q, k, v, None, offsets, offsets, longest, longest, False, 0.0, True, False, scale=D**-0.5
        )[0]

    return call, (q, k, v, offsets)


def ragged_check(lengths: list[int], heads_kv: int) -> float:
    """Max abs difference of the ragged call against per-prompt dense SDPA (math backend)."""
    call, (q, k, v, offsets) = ragged(lengths, heads_kv=heads_kv)
    got = call()
    worst = 0.0
    for i in range(len(lengths)):
        rows = slice(int(offsets[i]), int(offsets[i + 1]))
        ref = F.scaled_dot_product_attention(
            q[rows].transpose(0, 1).float(),
            k[rows].transpose(0, 1).float(),
            v[rows].transpose(0, 1).float(),
            is_causal=True,
            enable_gqa=True,
        ).transpose(0, 1)
        worst = max(worst, (got[rows].float() - ref).abs().max().item())
    return worst


def first_call_ms(lengths: list[int], max_len: int | None) -> float:
    call, _ = ragged(lengths, max_len)
    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def attempt(fn, *args):
    try:
        return fn(*args)
    except Exception as error:  # a refused layout is a result too
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = {"command": "python " + " ".join(sys.argv), "device": torch.cuda.get_device_name(), "dense": {}}
    for batch, length in [(1, 8192), (4, 2048)]:
        result["dense"][f"B={batch} new={length}"] = attempt(dense_cases, batch, length)
    result["ragged"] = {}
    for lengths in [[8192], [2048] * 4, [300, 1500, 555, 2047, 64, 900]]:

        def timed(lengths=lengths):
            us = gpu_us(ragged(lengths)[0])
            return {"us": us, "tflops": flops(lengths) / us / 1e6}

        result["ragged"][str(lengths)] = attempt(timed)
    result["ragged_max_abs_error"] = {
        "grouped kv heads": attempt(ragged_check, [300, 77, 1024], HKV),
        "kv heads expanded": attempt(ragged_check, [300, 77, 1024], HQ),
    }
    new_shapes = [[300, 200], [301, 200], [555, 17, 99], [1024, 3, 3, 900]]
    result["ragged_first_call_ms"] = {
        "exact max length": [attempt(first_call_ms, lengths, None) for lengths in new_shapes],
        "max length held at 2048": [attempt(first_call_ms, lengths, 2048) for lengths in new_shapes],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
