"""Where a steady decode step's host time goes, by function: cProfile over 300 single-step decode steps
of 256 sequences with every overlap off (the null executor, or with --gpu the real model runner on
CUDA, Llama-3-8B shapes, graphs on). cProfile adds its own cost to every Python call, so the figures
rank functions and compare hosts; the step times of benchmarks/cpu_overhead.py are the ones to quote.

    python benchmarks/steady_decode_profile.py runs/cpu/steady_decode_profile.json
    python benchmarks/steady_decode_profile.py --gpu runs/h200/steady_decode_profile.json

Takes about 10 s on the 2-core CPU; --gpu adds a model load. Writes OUT.json; the published ones are
docs/measurements/cpu/steady_decode_profile.json and docs/measurements/h200/steady_decode_profile*.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from pathlib import Path

import torch
from cpu_overhead import NUM_SEQS, steady_decode_engine

from llmbench.device.environment import command_line

STEPS, TOP = 300, 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()
    # prefill, then decodes until the graphs and buffers are warm
    engine = steady_decode_engine(args.gpu, warm_steps=20)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    for _ in range(STEPS):
        engine.step()
    profile.disable()
    wall_ms = (time.perf_counter() - start) * 1e3 / STEPS
    engine.shutdown()
    stats = pstats.Stats(profile)
    rows = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        where = f"{Path(path).name}:{line}({name})" if line else name
        rows.append(
            {
                "function": where,
                "calls_per_step": calls / STEPS,
                "self_us_per_step": tottime / STEPS * 1e6,
                "cumulative_us_per_step": cumtime / STEPS * 1e6,
            }
        )
    rows.sort(key=lambda r: -r["self_us_per_step"])
    for row in rows[:TOP]:
        print(f"{row['self_us_per_step']:8.1f} us  {row['calls_per_step']:7.1f}x  {row['function']}")
    result = {
        "command": f"python benchmarks/{command_line()}",
        "device": torch.cuda.get_device_name() if args.gpu else "null executor",
        "num_seqs": NUM_SEQS,
        "steps": STEPS,
        "profiled_step_ms": wall_ms,
        "top_by_self_time": rows[:TOP],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
