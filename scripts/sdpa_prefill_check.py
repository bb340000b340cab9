"""prefill_attention sdpa on a GPU: which SDPA backend each call of the split op gets, what a prompt
length costs the first time it is seen, and greedy outputs with the toggle on against off.

    python scripts/sdpa_prefill_check.py --out results/h200/sdpa_prefill_check.json

Backends: torch picks cuDNN only when it accepts the tensors as the model passes them (q and k RoPE's
contiguous output, v a strided slice of the fused QKV projection, grouped KV heads); a refusal falls
through to flash silently, so the choice of every call is recorded, with cuDNN's reason when it refused.
First calls: cuDNN builds an execution plan for each new shape, and a ShareGPT-like load brings new
prompt lengths all the time; timed with and without TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1. Agreement: as
scripts/backend_agreement.py, the same random weights and mixed requests, greedy; bf16 rounding differs
between the two paths (tests/kernels/test_attention_split.py holds them to the reference on the GPU), so
the report gives each request's first divergence."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from backend_agreement import first_divergence, generate, requests
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.loader import model_shape
from torch.nn.attention import SDPBackend

from llmbench.kernel_cases_sdpa import split_case

BACKEND_NAMES = {int(b): name for name, b in SDPBackend.__members__.items()}
NEW_LENGTHS = [300, 301, 555, 1024, 1500, 2047]
STEPS = {
    "one 8192-token prompt": (1, 8192, 0),
    "4 x 2048": (4, 2048, 0),
    "2 x 2048 + 64 decodes": (2, 2048, 64),
}


def backend_choices() -> dict:
    chosen: list[dict] = []
    real = F.scaled_dot_product_attention

    def recording(q, k, v, **kwargs):
        choice = torch._fused_sdp_choice(q, k, v, is_causal=True, scale=kwargs["scale"], enable_gqa=True)
        entry = {"q": list(q.shape), "k": list(k.shape), "v_strides": list(v.stride())}
        entry["backend"] = BACKEND_NAMES.get(int(choice), str(choice))
        if entry["backend"] != "CUDNN_ATTENTION":
            params = torch.backends.cuda.SDPAParams(q, k, v, None, 0.0, True, True)
            torch.backends.cuda.can_use_cudnn_attention(params, True)  # its reasons, as warnings
        chosen.append(entry)
        return real(q, k, v, **kwargs)

    result = {}
    F.scaled_dot_product_attention = recording
    try:
        for name, (prompts, length, decodes) in STEPS.items():
            chosen.clear()
            split_case(prompts, length, torch.bfloat16, num_decodes=decodes).make()()
            result[name] = list(chosen)
    finally:
        F.scaled_dot_product_attention = real
    return result


def first_calls() -> list[dict]:
    """Milliseconds of one prompt's split attention (one layer) at a length not seen before, then again."""
    rows = []
    for length in NEW_LENGTHS:
        call = split_case(1, length, torch.bfloat16).make()
        times = []
        for _ in range(2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            call()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        rows.append({"length": length, "first_ms": times[0], "second_ms": times[1]})
    return rows


def first_calls_in_a_child(avoid_recompile: bool) -> list[dict]:
    """first_calls in a fresh process (torch reads the variable once): TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1
    has torch (2.9 on) run cuDNN's ragged path for these shapes instead of a plan per shape."""
    env = {**os.environ, "TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1" if avoid_recompile else "0"}
    child = [sys.executable, __file__, "--first-calls", "--out", os.devnull]
    done = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="llama3-8b")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--first-calls", action="store_true", help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.first_calls:
        print(json.dumps(first_calls()))
        return

    model = ModelConfig(preset=args.preset, device="cuda", dtype="bfloat16")
    # backend_agreement.py's engine, with the Triton backend and decode graphs on both sides
    shared = dict(max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=1024, kv_cache_memory_gb=8)
    shared |= dict(cuda_graphs=True, cuda_graph_sizes=[1, 2, 4, 8, 16, 32, 64], attention_backend="triton")

    choices = backend_choices()
    calls = {f"avoid_recompile={flag}": first_calls_in_a_child(flag) for flag in (False, True)}
    prompts, params = requests(args.num_requests, model_shape(ModelConfig(preset=args.preset)).vocab_size)
    paged = generate(EngineConfig(model=model, **shared), prompts, params)
    sdpa = generate(EngineConfig(model=model, **shared, prefill_attention="sdpa"), prompts, params)
    divergences = [first_divergence(a, b) for a, b in zip(paged, sdpa, strict=True)]
    total = sum(len(a) for a in paged)
    agreeing = sum(x == y for a, b in zip(paged, sdpa, strict=True) for x, y in zip(a, b, strict=True))
    result = {
        "command": "python " + " ".join(sys.argv),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "sdpa_backend_per_call": choices,
        "first_calls_one_layer": calls,
        "compared": "prefill_attention sdpa vs paged; triton backend, CUDA graphs, greedy, bf16",
        "num_requests": len(prompts),
        "output_tokens": total,
        "token_agreement": agreeing / total,
        "identical_requests": divergences.count(None),
        "first_divergences": sorted(d for d in divergences if d is not None),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "first_divergences"}, indent=2))


if __name__ == "__main__":
    main()
