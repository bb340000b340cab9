"""The host work of a step right after the host did something else for a while, as a synchronous
engine's step follows its wait for the GPU: the null executor's steady single-step decode of 256
sequences (Llama-3-8B shapes), in rounds that alternate steps back to back, steps each followed by a
9 ms sleep, steps each followed by 9 ms of Python spinning on the clock, and steps each followed by
9 ms of a C loop that runs no Python bytecode and touches no memory (summing a repeated zero); on a
machine with CUDA also steps each followed by a 9 ms GPU kernel the host waits for as the engine
does (torch.cuda.Event.synchronize, which spins in the driver). Host phases per step, medians over
each round's last 100 steps.

    python benchmarks/host_after_pause.py runs/cpu/host_after_pause.json
    python benchmarks/host_after_pause.py runs/h200/host_after_pause.json   (on the H200 host)

Takes under a minute on the 2-core CPU (27 s at a load average of 18). Writes OUT.json; the published
ones are docs/measurements/cpu/host_after_pause.json and docs/measurements/h200/host_after_pause.json.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cpu_overhead import steady_decode_engine
from torch.cuda import is_available as cuda_available

from llmbench.device.environment import command_line
from llmbench.metrics.steps import cpu_ms

PAUSE_S, STEPS, ROUNDS = 0.009, 120, 4


def sleep() -> None:
    time.sleep(PAUSE_S)


def spin() -> None:
    end = time.perf_counter() + PAUSE_S
    while time.perf_counter() < end:
        pass


def c_loop(pause_s: float) -> Callable[[], None]:
    """A pause of about pause_s spent in one C loop (sum over itertools.repeat), its length measured."""
    count = 10**6
    start = time.perf_counter()
    sum(itertools.repeat(0, count))
    count = int(count * pause_s / (time.perf_counter() - start))
    return lambda: sum(itertools.repeat(0, count))


def gpu_wait(pause_s: float) -> Callable[[], None]:
    """A pause of about pause_s waiting on a GPU kernel that spins that long (its cycles measured)."""
    import torch

    cycles = 10**7
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # the first launch loads the kernel
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    cycles = int(cycles * pause_s * 1e3 / start.elapsed_time(end))

    def wait() -> None:
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()

    return wait


def main(out: Path) -> None:
    engine = steady_decode_engine(gpu=False, warm_steps=20)
    pauses = [
        ("back to back", None),
        ("9 ms sleep", sleep),
        ("9 ms spin", spin),
        ("9 ms C loop", c_loop(PAUSE_S)),
    ]
    if cuda_available():
        pauses.append(("9 ms GPU wait", gpu_wait(PAUSE_S)))
    rows = []
    for round_ in range(ROUNDS):
        for name, pause in pauses:
            for _ in range(STEPS):
                engine.step()
                if pause is not None:
                    pause()
            records = engine.drain_step_records()[-100:]

            def median(field: str, records=records) -> float:
                return statistics.median(getattr(r, field) for r in records)

            row = {"round": round_, "between_steps": name}
            row["host_ms"] = statistics.median(cpu_ms(vars(r)) for r in records)
            row.update({f"{phase}_ms": median(f"{phase}_ms") for phase in ("schedule", "prepare", "output")})
            rows.append(row)
            print(f"round {round_} {name:14s} host {row['host_ms']:.3f} ms", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": f"python benchmarks/{command_line()}", "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
