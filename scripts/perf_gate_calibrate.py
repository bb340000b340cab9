"""Measure the regression gate's error rates on this machine: scripts/perf_gate.sh run again and again
with the same commit on both sides (A/A: every failure is a false alarm), some of them with a CPU hog
busy on another core, and with known slowdowns injected into the current side. The kinds alternate, so
all face the same machine; the load average and wall time are recorded with each gate.

Slowdowns are a share of the baseline's per-step cost, injected at the start of every
`Scheduler.schedule()` or `InputBuffers.prepare()` (PERF_GATE_INJECT_AT):
- instructions mode: N turns of an empty loop (PERF_GATE_INJECT_LOOPS), a fixed count of instructions.
  N is sized from one probe gate per site, which measures what a turn adds to a step's count;
- wall mode: a busy-wait (PERF_GATE_INJECT_US) sized from the first A/A gate's CPU ms per step.

The published calibrations are docs/measurements/cpu/perf_gate_calibration_{instructions,wall}.json
(docs/guides/ci-gate.md), made with

    python3 scripts/perf_gate_calibrate.py --mode instructions --aa 20 --hog 10 \\
        --injected schedule:3%:10,prepare:3%:10,schedule:5%:5,prepare:5%:5
    python3 scripts/perf_gate_calibrate.py --mode wall --aa 20 --hog 10 --injected schedule:20%:10

An instructions gate takes about a minute on the project's 2 cores (two with the hog), a wall gate
10-60 s.
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("perf_gate_calibrate")
PROBE_LOOPS = 2_000  # instructions mode: loop turns a probe gate injects to price one turn


@dataclass(frozen=True)
class Injection:
    site: str  # schedule or prepare
    fraction: float
    gates: int


def parse_injections(text: str) -> list[Injection]:
    injections = []
    for part in filter(None, text.split(",")):
        site, fraction, gates = part.split(":")
        if site not in ("schedule", "prepare"):
            raise SystemExit(f"--injected {part!r}: the site is schedule or prepare")
        injections.append(Injection(site, float(fraction.rstrip("%")) / 100, int(gates)))
    return injections


def run_gate(mode: str, commit: str, pairs: int, threshold: str | None, inject: dict[str, str]) -> dict:
    """One real gate: both sides built from `commit`; its exit code, verdict and the load around it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_GATE_INJECT")}
    env.update(inject)
    with tempfile.TemporaryDirectory() as keep:
        command = [str(ROOT / "scripts" / "perf_gate.sh"), "--mode", mode, "--baseline", commit]
        command += ["--current", commit, "--pairs", str(pairs), "--keep", keep]
        command += ["--threshold", threshold] if threshold else []
        load_before, start = os.getloadavg()[0], time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
        if done.returncode not in (0, 1, 3):
            raise SystemExit(f"perf gate exited {done.returncode}: {done.stderr[-2000:]}")
        verdict = json.loads((Path(keep) / "verdicts.json").read_text())["verdicts"][-1]
    return {
        "exit_code": done.returncode,
        "verdict": verdict["verdict"],
        "baseline": verdict["baseline"],
        "current": verdict["current"],
        "change": verdict["change"],
        "ci": [verdict["ci_low"], verdict["ci_high"]],
        "detectable": verdict["detectable"],
        "seconds": seconds,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "inject": inject,
    }


def summarize(gates: list[dict]) -> dict:
    changes = [g["change"] for g in gates]
    return {
        "gates": len(gates),
        "exit_codes": {str(c): sum(g["exit_code"] == c for g in gates) for c in (0, 1, 3)},
        "regression_verdicts": sum(g["verdict"] == "REGRESSION" for g in gates),
        "change_min": min(changes) if changes else None,
        "change_median": float(np.median(changes)) if changes else None,
        "change_max": max(changes) if changes else None,
        "seconds_max": max(g["seconds"] for g in gates) if gates else None,
        "seconds_median": float(np.median([g["seconds"] for g in gates])) if gates else None,
    }


class Hog:
    """A busy loop on another core, as a neighbour's job on a shared runner would be."""

    def __enter__(self) -> Hog:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("instructions", "wall"), default="instructions")
    parser.add_argument("--aa", type=int, default=20, help="A/A gates")
    parser.add_argument("--hog", type=int, default=10, help="of the A/A gates, how many run beside a CPU hog")
    parser.add_argument(
        "--injected", default="schedule:3%:10,prepare:3%:10", help="SITE:PERCENT:GATES, comma-separated"
    )
    parser.add_argument("--pairs", type=int, default=20, help="wall mode's pairs a round")
    parser.add_argument("--threshold", help="the gate's threshold (default: the mode's)")
    parser.add_argument("--commit", default="HEAD", help="the code on both sides")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    injections = parse_injections(args.injected)
    if args.aa < 1 or not 0 <= args.hog <= args.aa:
        parser.error("--aa must be >= 1 and --hog between 0 and --aa")
    out = args.out or ROOT / "runs" / f"perf_gate_calibration_{args.mode}.json"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    aa: list[dict] = []
    probes: dict[str, dict] = {}
    injected: dict[str, list[dict]] = {}

    def write(complete: bool) -> None:
        """The file as it stands, after every gate: a calibration cut short keeps what it measured."""
        aa_values = [g[side] for g in aa for side in ("baseline", "current")]
        result = {
            "command": shlex.join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
            "commit": commit,
            "mode": args.mode,
            "complete": complete,
            "started_at": started,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu_count": os.cpu_count(),
            "gate": {"pairs": args.pairs, "threshold": args.threshold or "the mode's default"},
            "baseline_per_step": aa[0]["baseline"] if aa else None,
            "load_average_range": [min(g["load_before"] for g in aa), max(g["load_before"] for g in aa)],
            "aa": summarize(aa),
            "aa_quiet": summarize([g for g in aa if not g["hog"]]),
            "aa_hog": summarize([g for g in aa if g["hog"]]),
            # (largest - smallest) / mean of every side of every A/A gate
            "aa_spread": (max(aa_values) - min(aa_values)) / float(np.mean(aa_values)),
            "injected": {key: summarize(gates) for key, gates in injected.items()},
            "probes": probes,
            "aa_gates": aa,
            "injected_gates": injected,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")

    def gate(inject: dict[str, str], hog: bool = False) -> dict:
        if hog:
            with Hog():
                result = run_gate(args.mode, commit, args.pairs, args.threshold, inject)
        else:
            result = run_gate(args.mode, commit, args.pairs, args.threshold, inject)
        result["hog"] = hog
        log.info(
            "%s%s: exit %d, %s %+.3f%% (%.6g -> %.6g), %.0f s",
            inject or "A/A",
            " (hog)" if hog else "",
            result["exit_code"],
            result["verdict"],
            100 * result["change"],
            result["baseline"],
            result["current"],
            result["seconds"],
        )
        return result

    aa.append(gate({}))
    write(complete=False)
    base_per_step = aa[0]["baseline"]
    sizes = {}
    for site in sorted({i.site for i in injections}):
        if args.mode == "instructions":
            probes[site] = gate({"PERF_GATE_INJECT_AT": site, "PERF_GATE_INJECT_LOOPS": str(PROBE_LOOPS)})
            write(complete=False)
            per_turn = (probes[site]["current"] - probes[site]["baseline"]) / PROBE_LOOPS
            sizes[site] = ("PERF_GATE_INJECT_LOOPS", per_turn)  # instructions a turn adds to a step
        else:
            sizes[site] = ("PERF_GATE_INJECT_US", 1e-3)  # a microsecond is 1e-3 of a CPU ms per step

    def inject_env(injection: Injection) -> dict[str, str]:
        variable, unit = sizes[injection.site]
        amount = injection.fraction * base_per_step / unit
        text = str(round(amount)) if variable.endswith("LOOPS") else f"{amount:.2f}"
        return {"PERF_GATE_INJECT_AT": injection.site, variable: text}

    # the kinds round-robin (schedule 3%, prepare 3%, ...), spread evenly between the A/A gates
    queue = [
        (injection, inject_env(injection))
        for turn in range(max((i.gates for i in injections), default=0))
        for injection in injections
        if turn < injection.gates
    ]
    total = len(queue)
    for k in range(1, args.aa + 1):
        if k > 1:  # the hog beside every other A/A gate, until --hog of them had it
            aa.append(gate({}, hog=k % 2 == 0 and k // 2 <= args.hog))
            write(complete=False)
        while queue and total - len(queue) < total * k // args.aa:
            injection, env = queue.pop(0)
            key = f"{injection.site}:{injection.fraction:.0%}"
            injected.setdefault(key, []).append(gate(env))
            write(complete=False)
    write(complete=True)
    log.info("A/A %d gates, injected %s; written %s", len(aa), list(injected), out)


if __name__ == "__main__":
    main()
