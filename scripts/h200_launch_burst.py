"""Does a step's host time depend on how its CUDA calls are spread among its Python? The model runner
fills the host buffer and prepares the sampler before the step's first CUDA call, so the calls come in
one burst (B). The order before (A) waited for the host buffer's last copy before filling it and sent
it before preparing the sampler: three stretches of Python, each ending in a CUDA call. A is rebuilt
here from the same code (InputBuffers.fill, then send right after it, behind the old wait), so one
process runs both, in blocks of steps that take turns (A B, then B A, ...): a GPU host's speed drifts
by up to 2x within a minute (results/h200/launch_burst/*.json), too much for two processes to compare.

256 sequences decoding, single step, every overlap off, CUDA graphs on (scripts/cpu_overhead.py's
engine). Host time per step is schedule + prepare + output, medians per block and side.
    python scripts/h200_launch_burst.py results/h200/launch_burst/in_process.json"""

import json
import statistics
import sys
from pathlib import Path

import torch
from cpu_overhead import NUM_SEQS, drain, steady_decode_engine

from engine.input_batch import InputBuffers
from llmbench.env import command_line

ROUNDS, STEPS_PER_BLOCK = 16, 60


def scattered(buffers: InputBuffers) -> None:
    """The order before: the wait for the buffer's last copy, then fill and send together."""
    fill, send = buffers.fill, buffers.send

    def fill_and_send(batch):
        buffers._copied[(buffers._turn + 1) % 2].synchronize()
        inputs = fill(batch)
        send(inputs, batch)
        return inputs

    buffers.fill = fill_and_send
    buffers.send = lambda inputs, batch: None


def burst(buffers: InputBuffers) -> None:
    """The model runner's own order: the class's methods again."""
    buffers.__dict__.pop("fill", None)
    buffers.__dict__.pop("send", None)


def block(engine, order) -> dict:
    order(engine.executor.inputs)
    for _ in range(STEPS_PER_BLOCK):
        engine.step()
    records = [r for r in drain(engine, gpu=True) if r.num_decode_seqs == NUM_SEQS]
    return {
        "host_ms": statistics.median(r.schedule_ms + r.prepare_ms + r.output_ms for r in records),
        "prepare_ms": statistics.median(r.prepare_ms for r in records),
        "steps": len(records),
    }


def main(out: Path) -> None:
    engine = steady_decode_engine(gpu=True)
    sides = {"A": scattered, "B": burst}
    rounds = []
    for r in range(ROUNDS):
        names = ("A", "B") if r % 2 == 0 else ("B", "A")
        rounds.append({name: block(engine, sides[name]) for name in names})
    engine.shutdown()
    summary = {}
    for name in sides:
        for figure in ("host_ms", "prepare_ms"):
            values = [r[name][figure] for r in rounds]
            summary[f"{name}_{figure}"] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    host_gain = [r["A"]["host_ms"] - r["B"]["host_ms"] for r in rounds]
    summary["host_ms_a_minus_b"] = {
        "median": statistics.median(host_gain),
        "rounds_b_faster": sum(g > 0 for g in host_gain),
        "rounds": ROUNDS,
    }
    result = {
        "command": f"python scripts/{command_line()}",
        "device": torch.cuda.get_device_name(),
        "num_seqs": NUM_SEQS,
        "steps_per_block": STEPS_PER_BLOCK,
        "summary": summary,
        "rounds": rounds,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
