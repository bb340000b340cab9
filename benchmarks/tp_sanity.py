"""The tensor-parallel code path on whatever devices are present: greedy tokens and decode throughput of
the plain runner against rank 0 of a torch.distributed group (NCCL on CUDA, gloo on the CPU).

    python benchmarks/tp_sanity.py --preset llama3-8b --size 1 --out runs/h200/tp_sanity.json

`--size 1` runs a one-rank group (no worker process) through every collective of the tensor-parallel
path: the step's one broadcast (its header inside), the all-reduces (inside the CUDA graphs when
`--cuda-graphs`) and the logits gather; `--size N` needs N GPUs (or runs N CPU ranks) and starts N - 1
workers. Tokens must equal the plain runner's; the JSON holds both runs' tokens per second, steps and
mean comm_ms per step.

Takes about 16 s with --preset tiny --device cpu --size 2 on the 2-core CPU (at a load average of 18);
on a GPU a model load per run. Writes --out FILE (without it, prints only); the published ones are
docs/measurements/cpu/tp_sanity.json and docs/measurements/h200/tp_sanity.json."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import llmbench.engine.core.llm_engine as llm_engine
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.model_runner import ModelRunner
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.parallel.launch import start_runner
from llmbench.engine.request import SamplingParams


def grouped_executor(config: EngineConfig) -> ModelRunner:
    """The runner as rank 0 of a group, also of one rank, which the engine itself runs without a group."""
    facts = resolve_model_facts(config)
    return start_runner(config, facts, lambda group: ModelRunner(config, facts, group))


def measure(config: EngineConfig, prompts: list[list[int]], max_tokens: int, grouped: bool) -> dict:
    """Build the engine (rank 0 of a group when grouped), warm it up, and time one greedy batch."""
    make_executor = llm_engine.make_executor
    if grouped:
        llm_engine.make_executor = grouped_executor
    try:
        engine = LLMEngine(config)
    finally:
        llm_engine.make_executor = make_executor
    try:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        engine.generate(prompts[:2], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
        engine.drain_step_records()
        start = time.perf_counter()
        tokens = engine.generate(prompts, params)
        elapsed = time.perf_counter() - start
        records = engine.drain_step_records()
    finally:
        engine.shutdown()
    return {
        "tokens": tokens,
        "output_tokens_per_s": sum(map(len, tokens)) / elapsed,
        "steps": len(records),
        "mean_comm_ms": statistics.fmean(r.comm_ms for r in records) if records else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", type=int, default=1, help="tensor_parallel_size of the grouped run")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cuda-graphs", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = ModelConfig(preset=args.preset, device=args.device)
    common = dict(model=model, max_num_seqs=args.requests, cuda_graphs=args.cuda_graphs)
    prompts = [[(7 * i + 13 * j) % 500 + 3 for j in range(args.prompt_len)] for i in range(args.requests)]
    plain = measure(EngineConfig(**common), prompts, args.max_tokens, grouped=False)
    grouped = measure(EngineConfig(**common, tensor_parallel_size=args.size), prompts, args.max_tokens, True)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "preset": args.preset,
        "tensor_parallel_size": args.size,
        "cuda_graphs": args.cuda_graphs,
        "tokens_equal": plain["tokens"] == grouped["tokens"],
        "plain": {k: v for k, v in plain.items() if k != "tokens"},
        "grouped": {k: v for k, v in grouped.items() if k != "tokens"},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if not result["tokens_equal"]:
        raise SystemExit("tokens differ between the plain and the grouped runner")


if __name__ == "__main__":
    main()
