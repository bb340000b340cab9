"""How faithfully llmbench's client times a server of known latency, beside a bare-socket reference client,
both judged by what the server actually sent.

The judge is llmbench.mock_server, in a process of its own: TTFT 50 ms, then a token every 10 ms, 128
tokens, one SSE event a token; it stamps every write on CLOCK_MONOTONIC, the clock both clients stamp
with. A run keeps `streams` requests in flight (a closed loop, every first request due at t = 0) until
2 x streams are done (8 at 1 stream), against a fresh mock. The clients, each its own process:

- reference: benchmarks/reference_client.py, raw asyncio on uvloop, one keep-alive connection a stream,
  no HTTP library, a stamp a read, events counted by their bytes;
- llmbench: `llmbench run quickstart` with backend.type openai, fixed 128/128 lengths, arrival inf,
  max_concurrency = streams and every other setting its default (backend.workers auto); its figures
  are read from its summary.json, as a user reads them.

Per run, each client's median and p99 TTFT, mean and p99 ITL and mean TPOT minus the mock's own (from its
stamps: first write minus request read; every gap between consecutive token events, 0 within one
write; per request (last - first) / (n - 1)); the burst, how long until the last request of the first
wave (all due at t = 0) was written, by the client's stamps; for llmbench, summary.json's client_limited
and schedule lag. Rounds are interleaved: round r runs every stream count with both clients, their
order swapped each round; a figure is the median over rounds with its range. Targets, per round against
the reference of the same round: at 512 and 1,024 streams the median TTFT error at most 2x the
reference's + 5 ms, mean ITL within 0.2 ms of the mock's, p99 ITL within 2 ms, not client-limited; at
2,048, within 3x, or client-limited with its reason.

    python benchmarks/client_fidelity.py [--streams 1,64,512,1024,2048] [--rounds 3] [--out FILE]

Writes --out (the command, the host, every run, the summary; rewritten after every run, `complete: false`
until the last) and prints the table. Takes about a minute a round at the default stream counts on 16
cores."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from llmbench.mock_server import MockServer, MockSettings, StreamRecord
from llmbench.results.summary import RunSummary

REPO = Path(__file__).resolve().parent.parent
MOCK = MockSettings(ttft_ms=50, itl_ms=10, output_tokens=128)
PROMPT_TOKENS = 128
TIMEOUT_S = 600
FIGURES = ("median_ttft", "p99_ttft", "mean_itl", "p99_itl", "mean_tpot")


def requests_for(streams: int) -> int:
    return 8 if streams == 1 else 2 * streams


def latencies(requests: list[tuple[float, list[float]]]) -> dict[str, float]:
    """The figures, in ms, of requests given as (start, token times), one clock: TTFT from the start,
    ITL every gap between consecutive tokens (pooled), TPOT per request."""
    ttft = [tokens[0] - start for start, tokens in requests]
    itl = [b - a for _, tokens in requests for a, b in zip(tokens, tokens[1:], strict=False)]
    tpot = [(tokens[-1] - tokens[0]) / (len(tokens) - 1) for _, tokens in requests if len(tokens) > 1]
    ms = {
        "median_ttft": np.median(ttft),
        "p99_ttft": np.percentile(ttft, 99),
        "mean_itl": np.mean(itl),
        "p99_itl": np.percentile(itl, 99),
        "mean_tpot": np.mean(tpot),
    }
    return {name: float(value) * 1000 for name, value in ms.items()}


def mock_figures(records: list[StreamRecord]) -> dict[str, float]:
    """What the mock sent: from each request's read to each of its writes, a write's events one token each
    (the load's requests only: llmbench's preflight asks for one token)."""
    served = [r for r in records if r.status == 200 and r.tokens == MOCK.output_tokens]
    return latencies([
        (r.received, [sent for sent, events in zip(r.sends, r.events, strict=True) for _ in range(events)])
        for r in served
    ])  # fmt: skip


def run_reference(url: str, streams: int, requests: int, work: Path) -> dict:
    out = work / "reference.json"
    command = [sys.executable, str(REPO / "benchmarks" / "reference_client.py"), "--url", url,
               "--streams", str(streams), "--requests", str(requests), "--prompt-tokens", str(PROMPT_TOKENS),
               "--output-tokens", str(MOCK.output_tokens), "--out", str(out)]  # fmt: skip
    _run(command, work)
    rows = json.loads(out.read_text())["requests"]
    first = [row for row in rows if row["first"]]
    figures = latencies([(row["start"], row["tokens"]) for row in rows if row["tokens"]])
    burst = max(row["written"] for row in first) - first[0]["start"]
    return {"figures": figures, "completed": len(rows), "burst_ms": burst * 1000}


def run_llmbench(command: str, url: str, streams: int, requests: int, work: Path) -> dict:
    settings = {
        "backend.type": "openai",
        "backend.url": url,
        "workload.num_requests": requests,
        "workload.warmup_requests": 0,
        "workload.max_concurrency": streams,
        "workload.arrival.process": "inf",
        "workload.input.dist": "fixed",
        "workload.input.mean": PROMPT_TOKENS,
        "workload.output.dist": "fixed",
        "workload.output.mean": MOCK.output_tokens,
        "workload.prefix.groups": 0,
    }
    sets = [item for key, value in settings.items() for item in ("--set", f"{key}={value}")]
    out = work / "run"
    flags = ["--out", str(out), "--force", "--no-report", *sets]
    _run([*shlex.split(command), "run", "quickstart", *flags], work)
    summary = RunSummary.load(out)
    metrics, client = summary.metrics, summary.client
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]
    due = min(row["submit_time"] for row in rows)
    first = [row for row in rows if row["submit_time"] == due]  # the first wave: due at the start
    written = [row["request_sent_time"] for row in first if row.get("request_sent_time") is not None]
    return {
        "figures": {name: metrics.value(f"{name}_ms") for name in FIGURES},
        "completed": metrics.completed,
        "burst_ms": (max(written) - due) * 1000 if written else None,
        "client_limited": client.client_limited,
        "reason": client.reason,
        "schedule_lag_p99_ms": client.schedule_lag_ms.p99 if client.schedule_lag_ms else None,
        "workers": len(client.workers or []),
    }


def _run(command: list[str], work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    log = work / "client.log"
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=TIMEOUT_S, cwd=work)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{shlex.join(command[:4])}... exited with {done.returncode}: {' | '.join(tail)}")


def one_run(client: str, llmbench: str, streams: int, work: Path) -> dict:
    requests = requests_for(streams)
    with MockServer(MOCK) as mock:
        if client == "reference":
            got = run_reference(mock.url, streams, requests, work)
        else:
            got = run_llmbench(llmbench, mock.url, streams, requests, work)
        sent = mock_figures(mock.records())
    errors = {f"{name}_error_ms": got["figures"][name] - sent[name] for name in FIGURES}
    run = {"client": client, "streams": streams, "requests": requests, **errors, **got}
    return run | {"mock": sent, "load_average_1m": os.getloadavg()[0]}


def verdict(run: dict, reference: dict) -> dict:
    """The targets for one llmbench run against the reference run of the same round and stream count."""
    ratio = 3 if run["streams"] >= 2048 else 2
    slack = 0 if run["streams"] >= 2048 else 5
    bound = ratio * max(reference["median_ttft_error_ms"], 0.0) + slack
    checks = {
        "ttft": run["median_ttft_error_ms"] <= bound,
        "mean_itl": abs(run["mean_itl_error_ms"]) <= 0.2,
        "p99_itl": abs(run["p99_itl_error_ms"]) <= 2.0,
        "not_client_limited": not run["client_limited"],
    }
    met = all(checks.values()) or run["streams"] >= 2048 and (checks["ttft"] or run["client_limited"])
    if run["streams"] < 512:
        met = None  # no target below 512 streams
    return {"ttft_bound_ms": bound, **checks, "met": met}


def summarize(runs: list[dict]) -> list[dict]:
    """Per client and stream count: the median over rounds of each figure, its range, and the targets met."""
    keys = [f"{name}_error_ms" for name in FIGURES] + ["burst_ms", "load_average_1m"]
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["streams"], run["client"]), []).append(run)
    rows = []
    for (streams, client), group in sorted(groups.items()):
        row = {"client": client, "streams": streams, "rounds": len(group)}
        for key in keys:
            values = [run[key] for run in group if run[key] is not None]
            row[key] = statistics.median(values) if values else None
            row[key + "_range"] = [min(values), max(values)] if values else None
        if client == "llmbench":
            row["client_limited_rounds"] = sum(run["client_limited"] for run in group)
            row["reasons"] = sorted({run["reason"] for run in group if run["client_limited"]})
            row["workers"] = sorted({run["workers"] for run in group})
            met = [run["verdict"]["met"] for run in group if run.get("verdict")]
            row["targets_met_rounds"] = None if None in met or not met else f"{sum(met)} of {len(met)}"
        rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'streams':>7} {'client':<10} {'TTFT p50 err':>20} {'TTFT p99 err':>10} {'ITL mean err':>13} "
          f"{'ITL p99 err':>11} {'TPOT err':>9} {'burst ms':>9}  limited / targets")  # fmt: skip
    for row in rows:
        lo, hi = row["median_ttft_error_ms_range"]
        ttft = f"{row['median_ttft_error_ms']:7.1f} ({lo:5.1f}-{hi:5.1f})"
        burst = f"{row['burst_ms']:9.1f}" if row["burst_ms"] is not None else f"{'-':>9}"
        tail = ""
        if row["client"] == "llmbench":
            tail = f"  {row['client_limited_rounds']} of {row['rounds']}, workers {row['workers']}"
            tail += f", targets {row['targets_met_rounds'] or '-'}"
        print(
            f"{row['streams']:>7} {row['client']:<10} {ttft:>20} {row['p99_ttft_error_ms']:10.1f} "
            f"{row['mean_itl_error_ms']:13.3f} {row['p99_itl_error_ms']:11.2f} "
            f"{row['mean_tpot_error_ms']:9.3f} {burst}{tail}"
        )


def host_facts() -> dict:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    return {
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "loop": loop,
        "platform": platform.platform(),
        "commit": commit.stdout.strip(),
        "load_average_at_start": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--streams", default="1,64,512,1024,2048", help="stream counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llmbench", default=f"{sys.executable} -m llmbench", help="the llmbench command")
    parser.add_argument("--out", type=Path, default=REPO / "docs/measurements/cpu/client_fidelity.json")
    args = parser.parse_args()
    stream_counts = [int(s) for s in args.streams.split(",") if s]
    host = host_facts()  # before the runs: the commit they ran and the load they started under
    started = time.time()
    runs: list[dict] = []

    def write(complete: bool) -> list[dict]:
        """The file as it stands, rewritten after every run: a call cut short keeps the runs it made."""
        rows = summarize(runs)
        document = {
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "host": host,
            "complete": complete,
            "minutes": round((time.time() - started) / 60, 1),
            "mock": vars(MOCK),
            "summary": rows,
            "runs": runs,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1) + "\n")
        return rows

    with tempfile.TemporaryDirectory(prefix="client-fidelity-") as tmp:
        for round_ in range(args.rounds):
            for streams in stream_counts:
                order = ["reference", "llmbench"] if round_ % 2 == 0 else ["llmbench", "reference"]
                done = {}
                for client in order:
                    work = Path(tmp) / f"{streams}-{client}-{round_}"
                    done[client] = one_run(client, args.llmbench, streams, work) | {"round": round_}
                done["llmbench"]["verdict"] = verdict(done["llmbench"], done["reference"])
                for client in order:
                    run = done[client]
                    runs.append(run)
                    print(
                        f"round {round_} {client} @ {streams}: "
                        f"TTFT err {run['median_ttft_error_ms']:.1f} ms, "
                        f"ITL err {run['mean_itl_error_ms']:.3f} ms, burst {run['burst_ms'] or 0:.1f} ms, "
                        f"load {run['load_average_1m']:.1f}",
                        flush=True,
                    )
                write(complete=False)
    print_table(write(complete=True))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
