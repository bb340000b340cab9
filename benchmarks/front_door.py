"""How long the front door takes: `llmbench --help` and a config error (`llmbench run nosuchthing`) against a
bare `python -c "import torch"`, each a fresh process, in alternating rounds (help, error, torch, then
again) so that a change in the machine's load hits all three alike. Reports each command's wall times,
their medians and each llmbench command's median as a share of the torch import's.

    python3 benchmarks/front_door.py [--rounds 3] [--out docs/measurements/cpu/front_door.json]

Takes about 3 x (the three commands) seconds: 15-30 s on the 2-core CPU. Writes --out FILE (default
runs/front_door.json) with the command that made it, the machine and its load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmbench.results.files import write_atomic

TORCH = "python -c 'import torch'"


def commands(llmbench: str) -> dict[str, list[str]]:
    return {
        "llmbench --help": [llmbench, "--help"],
        "llmbench run nosuchthing": [llmbench, "run", "nosuchthing"],
        TORCH: [sys.executable, "-c", "import torch"],
    }


def wall_seconds(argv: list[str], cwd: Path) -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.run(argv, cwd=cwd, capture_output=True).returncode
    return time.perf_counter() - start, code


def measure(rounds: int) -> dict:
    llmbench = shutil.which("llmbench")
    if llmbench is None:
        sys.exit("no llmbench on PATH: pip install -e . first")
    timed = commands(llmbench)
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    codes: dict[str, int] = {}
    loads = []
    with tempfile.TemporaryDirectory() as scratch:  # no file named nosuchthing, no run written here
        for _ in range(rounds):
            loads.append(round(os.getloadavg()[0], 2))
            for name, argv in timed.items():
                wall, codes[name] = wall_seconds(argv, Path(scratch))
                seconds[name].append(round(wall, 3))
    medians = {name: round(statistics.median(values), 3) for name, values in seconds.items()}
    return {
        "command": shlex.join(["python3", *sys.argv]),
        "machine": {"arch": platform.machine(), "cores": os.cpu_count()},
        "load_average_1m": loads,
        "exit_codes": codes,
        "seconds": seconds,
        "median_s": medians,
        "share_of_import_torch": {
            name: round(medians[name] / medians[TORCH], 3) for name in timed if name != TORCH
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/front_door.json"))
    args = parser.parse_args()
    result = measure(args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_s"] | {"share_of_import_torch": result["share_of_import_torch"]}))


if __name__ == "__main__":
    main()
