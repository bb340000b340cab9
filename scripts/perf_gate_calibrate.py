"""Measure the regression gate's error rates on this machine: scripts/perf_gate.sh run again and again
with the same commit on both sides (A/A: every failure is a false alarm) and with a known slowdown
injected into the current side (PERF_GATE_INJECT_US: a busy-wait in every schedule(), sized from the first
A/A gate's baseline as the given fraction of its CPU ms per step). The two kinds alternate, so both face
the same load; the load average is recorded with each gate. A gate takes 10-22 s on the project's 2-core
CPU, so the command below runs for about 10-20 minutes; the published calibration is
docs/measurements/cpu/perf_gate_calibration.json (docs/guides/ci-gate.md).

    python3 scripts/perf_gate_calibrate.py --aa 40 --injected 20 --out runs/perf_gate_calibration.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("perf_gate_calibrate")


def run_gate(commit: str, pairs: int, threshold: str, inject_us: float | None) -> dict:
    """One real gate: both sides built from `commit`; its exit code, verdict and the load around it."""
    env = dict(os.environ)
    env.pop("PERF_GATE_INJECT_US", None)
    if inject_us is not None:
        env["PERF_GATE_INJECT_US"] = f"{inject_us:.2f}"
    with tempfile.TemporaryDirectory() as keep:
        command = [str(ROOT / "scripts" / "perf_gate.sh"), "--baseline", commit, "--current", commit]
        command += ["--pairs", str(pairs), "--threshold", threshold, "--keep", keep]
        load_before, start = os.getloadavg()[0], time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
        if done.returncode not in (0, 1):
            raise SystemExit(f"perf gate exited {done.returncode}: {done.stderr[-2000:]}")
        verdict = json.loads((Path(keep) / "verdicts.json").read_text())["verdicts"][-1]
    return {
        "exit_code": done.returncode,
        "verdict": verdict["verdict"],
        "change": verdict["change"],
        "ci": [verdict["ci_low"], verdict["ci_high"]],
        "detectable": verdict["detectable"],
        "baseline_cpu_ms_per_step": verdict["baseline"],
        "seconds": seconds,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def rates(gates: list[dict], counted: str) -> dict:
    """`counted` gates over all: failing ones (exit 1) for A/A, REGRESSION verdicts for the injected."""
    hits = [g["exit_code"] == 1 if counted == "failed" else g["verdict"] == "REGRESSION" for g in gates]
    changes = [g["change"] for g in gates]
    return {
        "gates": len(gates),
        counted: sum(hits),
        "rate": sum(hits) / len(gates) if gates else None,
        "median_change": float(np.median(changes)) if changes else None,
        "max_abs_change": float(np.max(np.abs(changes))) if changes else None,
        "median_detectable": float(np.median([g["detectable"] for g in gates])) if gates else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=40, help="A/A gates")
    parser.add_argument("--injected", type=int, default=20, help="gates with the slowdown injected")
    parser.add_argument("--slowdown", type=float, default=0.2, help="injected fraction of CPU ms per step")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--threshold", default="10%")
    parser.add_argument("--commit", default="HEAD", help="the code on both sides")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "perf_gate_calibration.json")
    args = parser.parse_args()
    if args.aa < 1 or args.injected < 0:
        parser.error("--aa must be >= 1 and --injected >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    aa, injected = [], []
    inject_us = None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for i in range(args.aa):
        aa.append(run_gate(commit, args.pairs, args.threshold, None))
        gate = aa[-1]
        log.info(
            "A/A %d: exit %d, %+.1f%%, load %.1f",
            i + 1,
            gate["exit_code"],
            100 * gate["change"],
            gate["load_before"],
        )
        if inject_us is None:
            inject_us = args.slowdown * aa[0]["baseline_cpu_ms_per_step"] * 1000
        # the injected gates spread evenly between the A/A ones
        while len(injected) < args.injected * (i + 1) // args.aa:
            injected.append(run_gate(commit, args.pairs, args.threshold, inject_us))
            gate = injected[-1]
            log.info("injected %d: exit %d, %+.1f%%", len(injected), gate["exit_code"], 100 * gate["change"])
    result = {
        "command": shlex.join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "commit": commit,
        "started_at": started,
        "gate": {"pairs": args.pairs, "threshold": args.threshold},
        "cpu_count": os.cpu_count(),
        "load_average_range": [
            min(g["load_before"] for g in aa + injected),
            max(g["load_before"] for g in aa + injected),
        ],
        "false_alarm": rates(aa, "failed"),
        "injected_slowdown": {"fraction": args.slowdown, "busy_wait_us_per_schedule": inject_us},
        "detection": rates(injected, "detected"),
        "aa_gates": aa,
        "injected_gates": injected,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info(
        "A/A false alarms %d/%d; injected %.0f%% detected %d/%d; written %s",
        result["false_alarm"]["failed"],
        len(aa),
        100 * args.slowdown,
        result["detection"]["detected"],
        len(injected),
        args.out,
    )


if __name__ == "__main__":
    main()
