"""The host work of a step right after the host did something else for a while, as a synchronous
engine's step follows its wait for the GPU: the null executor's steady single-step decode of 256
sequences (Llama-3-8B shapes), in rounds that alternate steps back to back, steps each followed by a
9 ms sleep, and steps each followed by 9 ms of Python spinning on the clock. Host phases per step,
medians over each round's last 100 steps.

    python scripts/host_after_pause.py results/cpu/host_after_pause.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from cpu_overhead import steady_decode_engine

from llmbench.env import command_line

PAUSE_S, STEPS, ROUNDS = 0.009, 120, 4


def sleep() -> None:
    time.sleep(PAUSE_S)


def spin() -> None:
    end = time.perf_counter() + PAUSE_S
    while time.perf_counter() < end:
        pass


def main(out: Path) -> None:
    engine = steady_decode_engine(gpu=False, warm_steps=20)
    rows = []
    for round_ in range(ROUNDS):
        for name, pause in (("back to back", None), ("9 ms sleep", sleep), ("9 ms spin", spin)):
            for _ in range(STEPS):
                engine.step()
                if pause is not None:
                    pause()
            records = engine.drain_step_records()[-100:]

            def median(field: str, records=records) -> float:
                return statistics.median(getattr(r, field) for r in records)

            row = {"round": round_, "between_steps": name}
            row["host_ms"] = statistics.median(r.schedule_ms + r.prepare_ms + r.output_ms for r in records)
            row.update({f"{phase}_ms": median(f"{phase}_ms") for phase in ("schedule", "prepare", "output")})
            rows.append(row)
            print(f"round {round_} {name:13s} host {row['host_ms']:.3f} ms", flush=True)
    out.write_text(json.dumps({"command": f"python scripts/{command_line()}", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
