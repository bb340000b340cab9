"""What one call costs with the caches warm and right after they were evicted: a few numpy calls on
256-element arrays (the kind input preparation makes each step) beside passes of Python's builtins
over lists of 256 ints. Each timing is one call right after a write through a buffer of --evict-mb
MiB (as a GPU host's step starts after a forward's wait that left its caches to other work), or right
after the same call (warm); the median of --repeats.

    python scripts/cold_call_costs.py --out results/cpu/lean_decode_inputs/call_costs.json"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from llmbench.env import command_line

N = 256
numbers = list(range(1000, 1000 + N))
lengths = np.arange(N, dtype=np.int64)
other = lengths.copy()
table = np.zeros((512, 64), dtype=np.int32)
rows = np.arange(N)
out = np.zeros(N * 8, dtype=np.int32).reshape(N, 8)
CALLS = {
    "numpy: array.max()": lambda: lengths.max(),
    "numpy: flatnonzero(a != b)": lambda: np.flatnonzero(lengths != other),
    "numpy: fromiter(map(len, lists))": lambda: np.fromiter(map(len, [numbers] * N), np.int64, N),
    "numpy: divmod(a, 16)": lambda: np.divmod(lengths, 16),
    "numpy: take(table, rows, out=)": lambda: np.take(table[:, :8], rows, axis=0, out=out),
    "builtin: max(list)": lambda: max(numbers),
    "builtin: list(map(len, lists))": lambda: list(map(len, [numbers] * N)),
    "builtin: list == list": lambda: numbers == list(numbers),
    "builtin: [x + 1 for x in list]": lambda: [x + 1 for x in numbers],
}


def median_us(call, evicting: np.ndarray | None, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if evicting is not None:
            evicting += 1.0  # read and written: every line of it passes through the caches
        else:
            call()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--evict-mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    if args.evict_mb < 1 or args.repeats < 1:
        parser.error("--evict-mb and --repeats must be at least 1")
    evicting = np.zeros(args.evict_mb << 17)  # float64: evict_mb MiB
    costs = {
        name: {
            "warm_us": median_us(call, None, args.repeats),
            "cold_us": median_us(call, evicting, args.repeats),
        }
        for name, call in CALLS.items()
    }
    for name, cost in costs.items():
        print(f"{name:36s} warm {cost['warm_us']:6.2f} us, cold {cost['cold_us']:6.2f} us")
    if args.out:
        result = {
            "command": f"python scripts/{command_line()}",
            "cpu": platform.processor() or platform.machine(),
            "evict_mb": args.evict_mb,
            "repeats": args.repeats,
            "costs": costs,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
