"""Host time per engine step with 256 sequences decoding, null executor (no model forward, but the model
runner's own input preparation into host buffers), single-step and 8 scheduler steps: the CPU-overhead
figures of the engine core. With --gpu the same on CUDA with the real model runner (Llama-3-8B shapes,
random bfloat16 weights, CUDA graphs on), adding the median GPU time of a step. The H200 hosts lent
for these runs differ up to 2x in speed, between calls and inside one, so each row also times the
host: a fixed piece of per-sequence Python (host_reference_us, before and after the row), and with
--gpu the null executor's single step at the same moment (null_host_ms, before and after: the
engine's own Python, whose working set a tight loop does not have), and once more with its forwards
as long as the row's GPU step (null_host_ms_after_gpu_wait: the host's cost of waiting, without CUDA).
    python benchmarks/cpu_overhead.py --out runs/cpu/cpu_overhead.json
    python benchmarks/cpu_overhead.py --gpu --out runs/h200/cpu_overhead.json
With --forward-ms the null executor's forwards take that long on a simulated device (as a GPU's would),
so the host work after each wait for tokens runs on caches other work used meanwhile.
    python benchmarks/cpu_overhead.py --forward-ms 9 --out runs/cpu/cpu_overhead_forward9.json
With --prompt-len every sequence starts from a longer prompt (the same one for all, 128 tokens by
default): each per-sequence loop then reads longer token lists and wider block tables.
    python benchmarks/cpu_overhead.py --prompt-len 1900 --out runs/cpu/cpu_overhead_len1900.json
With --evict-mb every step starts after a write through a buffer that large, as a GPU host's step
starts after a forward's wait that left its caches to other work: a CPU-only run then reads the cold-
cache cost the H200 host pays (its null executor steps take 2x as long after a 9 ms wait).
    python benchmarks/cpu_overhead.py --evict-mb 64 --out runs/cpu/cpu_overhead_evict64.json
With --distinct each sequence has a prompt of its own and sampling parameters of its own, as a
benchmark's requests do, instead of sharing one of each (and, through the prefix cache, the prompt's
blocks).

Takes about 10 s on the 2-core CPU (9 s at a load average of 18); --gpu adds a model load and warm-up.
Writes --out FILE (without it, prints only); the published ones are docs/measurements/cpu/cpu_overhead.json
and docs/measurements/h200/cpu_overhead.json."""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.gc_heap import freeze_heap
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledSeq

from llmbench.device.environment import command_line
from llmbench.metrics.steps import cpu_ms

NUM_SEQS, FORWARDS, MAX_MODEL_LEN = 256, 400, 4096


def host_reference_us() -> float:
    """Microseconds to build 256 scheduled entries and read a field of each back, the best of 50:
    per-sequence work of the kind every step repeats, timed alone, so rows from different hosts
    (or moments) can be set side by side."""
    params = SamplingParams(max_tokens=3000, ignore_eos=True)
    tokens, table = list(range(200)), list(range(13))
    best = float("inf")
    for _ in range(50):
        start = time.perf_counter()
        entries = [ScheduledSeq(i, tokens, 199, 1, table, params, True, 71) for i in range(NUM_SEQS)]
        sum([e.num_computed + e.num_new for e in entries])
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def drain(engine: LLMEngine, gpu: bool) -> list:
    if gpu:
        torch.cuda.synchronize()  # every step's GPU events have fired: the drain returns them all
    return engine.drain_step_records()


def steady_decode_engine(
    gpu: bool,
    num_scheduler_steps: int = 1,
    forward_ms: float = 0.0,
    warm_steps: int = 5,
    dependent_launch: bool = True,
    prompt_len: int = 128,
    distinct: bool = False,
) -> LLMEngine:
    """An engine with NUM_SEQS sequences decoding (Llama-3-8B shapes, every overlap off): the null
    executor (forwards of forward_ms on its simulated device), or with gpu the model runner on CUDA,
    random bfloat16 weights, graphs on (their kernels with dependent launch unless told otherwise).
    Every sequence starts from the same prompt of prompt_len tokens, with the same sampling
    parameters object; with distinct, from a prompt of its own, with its own object. Warmed until
    every sequence decodes, then by warm_steps steps more, their records drained, the garbage
    collector set as the benchmark runner and the engine core set it."""
    if gpu:
        model = ModelConfig(preset="llama3-8b", device="cuda", dtype="bfloat16")
    else:
        model = ModelConfig(preset="llama3-8b", executor="null", null_forward_ms=forward_ms)
    engine = LLMEngine(
        EngineConfig(
            model=model,
            max_num_seqs=NUM_SEQS,
            max_model_len=MAX_MODEL_LEN,
            num_scheduler_steps=num_scheduler_steps,
            cuda_graphs=gpu,
            dependent_launch=dependent_launch,
        )
    )
    max_tokens = min(3000, MAX_MODEL_LEN - prompt_len)
    shared = (list(range(1, prompt_len + 1)), SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    for i in range(NUM_SEQS):
        if distinct:  # no two prompts share a first token, so no prefix block is shared
            prompt = [(i * prompt_len + j) % 120_000 + 1 for j in range(prompt_len)]
            engine.add_request(str(i), prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        else:
            engine.add_request(str(i), *shared)
    scheduler = engine.scheduler
    while scheduler.waiting or any(seq.num_computed < prompt_len for seq in scheduler.running):
        engine.step()
    for _ in range(warm_steps):
        engine.step()
    drain(engine, gpu)
    freeze_heap()
    return engine


def null_host_ms(prompt_len: int, forward_ms: float = 0.0, distinct: bool = False) -> float:
    """The null executor's median single-step host time, as its row measures it (a few seconds), with
    its forwards taking forward_ms on the simulated device."""
    row = measure(1, False, prompt_len, forwards=200, forward_ms=forward_ms, distinct=distinct)
    return row["host_ms_per_step"]


def measure(
    num_scheduler_steps: int,
    gpu: bool,
    prompt_len: int,
    forwards: int = FORWARDS,
    forward_ms: float = 0.0,
    evict_mb: int = 0,
    distinct: bool = False,
) -> dict:
    reference_before = host_reference_us()
    null_before = null_host_ms(prompt_len, distinct=distinct) if gpu else None
    engine = steady_decode_engine(
        gpu, num_scheduler_steps, forward_ms, prompt_len=prompt_len, distinct=distinct
    )
    # float64, evict_mb MiB; none at all without --evict-mb, so that no numpy call runs between steps
    evicting = np.zeros(evict_mb << 17) if evict_mb else None
    for _ in range(forwards):  # a streamed window takes one step() call per forward
        if evicting is not None:
            evicting += 1.0  # read and written: every line of it passes through the caches
        engine.step()
    records = [r for r in drain(engine, gpu) if r.num_decode_seqs == NUM_SEQS]

    def median(field: str) -> float:
        return statistics.median(getattr(r, field) for r in records)

    host = statistics.median(cpu_ms(vars(r)) for r in records)
    row = {
        "num_scheduler_steps": num_scheduler_steps,
        "decode_steps": len(records),
        "host_ms_per_step": host,
        "host_ms_per_forward": host / num_scheduler_steps,
        **{f"{phase}_ms": median(f"{phase}_ms") for phase in ("schedule", "prepare", "output", "sample")},
        "step_ms": statistics.median((r.t_end - r.t_start) * 1e3 for r in records),
        "evict_mb": evict_mb,
    }
    if gpu:
        row["gpu_ms"] = median("gpu_ms")
    engine.shutdown()
    row["host_reference_us"] = [reference_before, host_reference_us()]
    if gpu:
        row["null_host_ms"] = [null_before, null_host_ms(prompt_len, distinct=distinct)]
        # the same null step after a wait as long as this row's GPU step: the host's cost of waiting
        wait_ms = row["gpu_ms"] / num_scheduler_steps
        row["null_host_ms_after_gpu_wait"] = null_host_ms(prompt_len, wait_ms, distinct)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--gpu", action="store_true", help="the real model runner on CUDA, graphs on")
    parser.add_argument(
        "--forward-ms",
        type=float,
        default=0.0,
        help="null executor: each forward takes this long on a simulated device (model.null_forward_ms)",
    )
    parser.add_argument("--prompt-len", type=int, default=128, help="tokens of each sequence's prompt")
    parser.add_argument(
        "--evict-mb", type=int, default=0, help="null executor: write through this many MiB before each step"
    )
    parser.add_argument(
        "--distinct", action="store_true", help="each sequence its own prompt and its own sampling parameters"
    )
    args = parser.parse_args()
    if not 1 <= args.prompt_len <= MAX_MODEL_LEN - FORWARDS - 20:
        parser.error(f"--prompt-len must be 1 to {MAX_MODEL_LEN - FORWARDS - 20}, leaving room for the steps")
    if args.gpu and (args.forward_ms or args.evict_mb):
        parser.error(
            "--forward-ms and --evict-mb stand in for a GPU host's forwards; --gpu runs the real one"
        )
    if not 0 <= args.evict_mb <= 4096:
        parser.error("--evict-mb must be 0 to 4096")
    rows = [
        measure(k, args.gpu, args.prompt_len, FORWARDS, args.forward_ms, args.evict_mb, args.distinct)
        for k in (1, 8)
    ]
    for row in rows:
        print(
            f"num_scheduler_steps={row['num_scheduler_steps']}: {row['host_ms_per_step']:.3f} ms/step, "
            f"{row['host_ms_per_forward']:.3f} ms/forward; schedule {row['schedule_ms']:.3f}, "
            f"prepare {row['prepare_ms']:.3f}, output {row['output_ms']:.3f} "
            f"(medians over {row['decode_steps']} steps)"
            + (f"; GPU {row['gpu_ms']:.3f}" if args.gpu else "")
            + "; host reference {:.1f} / {:.1f} us".format(*row["host_reference_us"])
            + (
                "; null executor {:.3f} / {:.3f} ms, {:.3f} after waits as long as the GPU's".format(
                    *row["null_host_ms"], row["null_host_ms_after_gpu_wait"]
                )
                if args.gpu
                else ""
            )
        )
    if args.out:
        result = {
            "command": f"python benchmarks/{command_line()}",
            "cpu": platform.processor() or platform.machine(),
            "cpu_affinity": sorted(os.sched_getaffinity(0)),  # a run under taskset says so here
            "device": torch.cuda.get_device_name() if args.gpu else "null executor",
            "null_forward_ms": args.forward_ms,
            "prompt_len": args.prompt_len,
            "distinct": args.distinct,
            "num_seqs": NUM_SEQS,
            "rows": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
