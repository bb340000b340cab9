"""Greedy outputs of the Triton backend (with decode CUDA graphs) against the torch reference backend, on
the same random weights and the same mixed requests.

    python benchmarks/backend_agreement.py --out runs/h200/agreement.json

bf16 rounding differs between the two (fused kernels, other reduction orders), so two near-tied logits
can swap and the sequences part from there: the report gives, per request, the first position where the
outputs differ (null when identical), and the fraction of all output positions that agree.

Takes under two minutes on an H200 (benchmarks/h200_measure.sh gives it 120 s). Writes --out FILE; the
published one is docs/measurements/h200/agreement.json."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.input_batch import prepare_inputs
from llmbench.engine.loading.loader import load_model
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.loading.source import model_shape
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledBatch, ScheduledSeq
from llmbench.kernels import reference, triton_ops

BLOCK = 16


def requests(count: int, vocab: int, seed: int = 0) -> tuple[list[list[int]], list[SamplingParams]]:
    """Prompts of 16-512 random tokens and 16-128 outputs, greedy, run to max_tokens."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(5, vocab) for _ in range(rng.randrange(16, 513))] for _ in range(count)]
    params = [SamplingParams(max_tokens=rng.randrange(16, 129), ignore_eos=True) for _ in range(count)]
    return prompts, params


def generate(config: EngineConfig, prompts: list[list[int]], params: list[SamplingParams]) -> list[list[int]]:
    engine = LLMEngine(config)
    outputs = engine.generate(prompts, params)
    engine.shutdown()
    del engine
    torch.cuda.empty_cache()
    return outputs


def logits_check(preset: str, device: str, prompts: list[list[int]]) -> dict:
    """Last-position logits of the prompts in one prefill forward: bf16 with each backend, and float32
    with the torch backend on the same (bf16-valued) weights. Tells bf16 rounding from a kernel bug: the
    Triton backend should sit as close to float32 as the torch backend in bf16 does."""
    config = EngineConfig(model=ModelConfig(preset=preset, device=device, dtype="bfloat16"))
    model = load_model(config.model, resolve_model_facts(config), triton_ops)
    seqs, next_block = [], 0
    for i, prompt in enumerate(prompts):
        num_blocks = -(-len(prompt) // BLOCK)
        table = list(range(next_block, next_block + num_blocks))
        next_block += num_blocks
        seqs.append(ScheduledSeq(i, prompt, 0, len(prompt), table, SamplingParams(), sample=True))
    batch = ScheduledBatch(seqs)
    s = model.shape

    @torch.inference_mode()
    def logits(ops) -> torch.Tensor:
        for module in model.modules():
            if hasattr(module, "ops"):
                module.ops = ops
        dtype = model.embed_tokens.weight.dtype
        layout = (next_block, BLOCK, s.num_kv_heads, s.head_dim)
        caches = [
            (torch.zeros(layout, dtype=dtype, device=device), torch.zeros(layout, dtype=dtype, device=device))
            for _ in range(s.num_layers)
        ]
        inputs = prepare_inputs(batch, BLOCK, torch.device(device))
        hidden = model(inputs.input_ids, inputs.positions, inputs.attn, caches)
        return model.compute_logits(hidden[inputs.sample_rows]).float()

    triton_bf16, torch_bf16 = logits(triton_ops), logits(reference)
    model.float()
    torch_fp32 = logits(reference)
    top2 = torch_fp32.topk(2, dim=-1).values

    def versus_fp32(x: torch.Tensor) -> dict:
        return {
            "rel_error": ((x - torch_fp32).norm() / torch_fp32.norm()).item(),
            "top1_agreement": (x.argmax(-1) == torch_fp32.argmax(-1)).float().mean().item(),
        }

    return {
        "prompts": len(prompts),
        "triton_bf16_vs_fp32": versus_fp32(triton_bf16),
        "torch_bf16_vs_fp32": versus_fp32(torch_bf16),
        "triton_vs_torch_bf16_rel_error": ((triton_bf16 - torch_bf16).norm() / torch_bf16.norm()).item(),
        "fp32_median_top1_top2_gap": (top2[:, 0] - top2[:, 1]).median().item(),
        "fp32_logit_std": torch_fp32.std().item(),
    }


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="llama3-8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    dtype = "bfloat16" if args.device == "cuda" else "float32"

    def config(backend: str, cuda_graphs: bool) -> EngineConfig:
        return EngineConfig(
            model=ModelConfig(preset=args.preset, device=args.device, dtype=dtype),
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            max_model_len=1024,
            kv_cache_memory_gb=8,
            cuda_graphs=cuda_graphs,
            cuda_graph_sizes=[1, 2, 4, 8, 16, 32, 64],
            attention_backend=backend,
        )

    prompts, params = requests(args.num_requests, model_shape(ModelConfig(preset=args.preset)).vocab_size)
    triton_out = generate(config("triton", cuda_graphs=args.device == "cuda"), prompts, params)
    torch_out = generate(config("torch", cuda_graphs=False), prompts, params)
    check = logits_check(args.preset, args.device, prompts[:16])
    per_request = []
    for i, (a, b) in enumerate(zip(triton_out, torch_out, strict=True)):
        diverges = first_divergence(a, b)
        per_request.append(
            {"request": i, "prompt_len": len(prompts[i]), "output_len": len(a), "first_divergence": diverges}
        )
    total = sum(len(a) for a in triton_out)
    agreeing = sum(
        x == y for a, b in zip(triton_out, torch_out, strict=True) for x, y in zip(a, b, strict=True)
    )
    identical = sum(r["first_divergence"] is None for r in per_request)
    result = {
        "command": "python " + " ".join(sys.argv),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "preset": args.preset,
        "dtype": dtype,
        "compared": f"triton backend (CUDA graphs: {args.device == 'cuda'}) vs torch backend, eager; greedy",
        "num_requests": len(prompts),
        "output_tokens": total,
        "token_agreement": agreeing / total,
        "identical_requests": identical,
        "first_divergences": sorted(
            r["first_divergence"] for r in per_request if r["first_divergence"] is not None
        ),
        "logits_check": check,
        "per_request": per_request,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(
        f"agreement: {agreeing}/{total} tokens ({agreeing / total:.3f}), {identical}/{len(prompts)} requests "
        f"identical; first divergences at {result['first_divergences']}"
    )
    print(f"logits check: {json.dumps(check)}")


if __name__ == "__main__":
    main()
