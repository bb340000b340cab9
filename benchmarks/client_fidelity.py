"""How faithfully benchmark clients time a server of known latency, and how many chunks a second each
can take in.

The judge is llmbench.mock_server, in a process of its own, which records when it wrote every chunk on
CLOCK_MONOTONIC. Fidelity: the mock streams 128 tokens, one chunk each, first after 50 ms, then every
10 ms; each client keeps `streams` requests in flight (1, 64, 512) for 8, 2x and 2x as many requests.
Per run: median TTFT error (the client's median TTFT minus the median of what the mock sent: first
chunk written minus request received) and mean ITL error (the client's pooled mean gap between chunks
minus the mock's), and the client's output tokens/s. Capacity: the mock at TTFT 0 and a chunk every
1 ms, so a client that keeps up is offered streams x 1000 chunks/s; chunks/s is what the client took in
(its chunks over its own span), the highest over --capacity-streams. The clients: the bare reference
client (benchmarks/reference_client.py), `llmbench run`, GuideLLM and AIPerf (their executables as
options; an absent one is skipped, saying so). Runs are interleaved: round r runs every stream count
and every client, the clients' order rotated each round; the spread is the range over rounds. The load
average is sampled after every run.

    python benchmarks/client_fidelity.py --guidellm /tmp/peer-guidellm/bin/guidellm \\
        --aiperf /tmp/peer-aiperf/bin/aiperf [--rounds 2] [--workers 1,2] [--out FILE]

Takes about 15-20 minutes on 2 cores with all four clients (GuideLLM starts in ~40 s a run). Writes
docs/measurements/cpu/client_fidelity.json (the command, the host, every run, the summary; rewritten
after every run, `complete: false` until the last) and prints the table."""

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

from fidelity_clients import Client, ClientTimes, make_clients

from llmbench.mock_server import MockServer, MockSettings, sent_latencies

REPO = Path(__file__).resolve().parent.parent
FIDELITY = MockSettings(ttft_ms=50, itl_ms=10, output_tokens=128)
CAPACITY = MockSettings(ttft_ms=0, itl_ms=1, output_tokens=128)


def requests_for(streams: int) -> int:
    return 8 if streams == 1 else 2 * streams


def one_run(client: Client, settings: MockSettings, streams: int, requests: int, work: Path) -> dict:
    with MockServer(settings) as mock:
        times = client.run(mock.url, streams, requests, settings.output_tokens, work)
        sent = sent_latencies(mock.records())
    return {
        "client": client.name,
        "streams": streams,
        "requests": requests,
        "completed": len(times.ttft_s),
        "median_ttft_error_ms": (statistics.median(times.ttft_s) - sent.median_ttft_s) * 1000,
        "mean_itl_error_ms": (_mean_itl(times) - sent.mean_itl_s) * 1000,
        "client_median_ttft_ms": statistics.median(times.ttft_s) * 1000,
        "mock_median_ttft_ms": sent.median_ttft_s * 1000,
        "client_mean_itl_ms": _mean_itl(times) * 1000,
        "mock_mean_itl_ms": sent.mean_itl_s * 1000,
        "output_tokens_per_s": times.tokens / times.span_s,
        "chunks_per_s": times.chunks / times.span_s,
        "mock_chunks_per_s": sent.chunks_per_s,
        "load_average_1m": os.getloadavg()[0],
    }


def _brief(run: dict) -> str:
    return (
        f"TTFT err {run['median_ttft_error_ms']:.1f} ms, ITL err {run['mean_itl_error_ms']:.2f} ms, "
        f"{run['chunks_per_s']:.0f} chunks/s, load {run['load_average_1m']:.1f}"
    )


def _mean_itl(times: ClientTimes) -> float:
    return times.itl_sum_s / times.itl_count if times.itl_count else float("nan")


def summarize(runs: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Per client and stream count: the median over rounds of each figure, and its range."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["client"], run["streams"]), []).append(run)
    rows = []
    for (client, streams), group in groups.items():
        row = {"client": client, "streams": streams, "rounds": len(group)}
        for key in keys:
            values = [run[key] for run in group]
            row[key] = statistics.median(values)
            row[key + "_range"] = [min(values), max(values)]
        rows.append(row)
    return rows


def host_facts() -> dict:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit.stdout.strip(),
        "load_average_at_start": os.getloadavg(),
    }


def print_table(fidelity: list[dict], capacity: list[dict]) -> None:
    head = f"{'client':<12} {'streams':>7} {'TTFT err ms (range)':>24} {'ITL err ms (range)':>22}"
    print(f"{head} {'tok/s':>8} {'load':>6}")
    for row in sorted(fidelity, key=lambda r: (r["streams"], r["client"])):
        t_lo, t_hi = row["median_ttft_error_ms_range"]
        i_lo, i_hi = row["mean_itl_error_ms_range"]
        ttft = f"{row['median_ttft_error_ms']:>8.1f} ({t_lo:>6.1f}-{t_hi:>6.1f})"
        itl = f"{row['mean_itl_error_ms']:>7.2f} ({i_lo:>5.2f}-{i_hi:>5.2f})"
        rate, load = row["output_tokens_per_s"], row["load_average_1m"]
        print(f"{row['client']:<12} {row['streams']:>7} {ttft} {itl} {rate:>8.0f} {load:>6.1f}")
    for row in sorted(capacity, key=lambda r: r["client"]):
        lo, hi = row["chunks_per_s_range"]
        print(
            f"capacity {row['client']:<12} {row['chunks_per_s']:>9.0f} chunks/s, rounds {lo:.0f}-{hi:.0f}"
            f" (at {row['streams']} streams)"
        )


def best_capacity(runs: list[dict]) -> list[dict]:
    """Per client: the stream count whose median chunks/s over rounds is highest."""
    best: dict[str, dict] = {}
    for row in summarize(runs, ("chunks_per_s", "mock_chunks_per_s", "load_average_1m")):
        if row["client"] not in best or row["chunks_per_s"] > best[row["client"]]["chunks_per_s"]:
            best[row["client"]] = row
    return list(best.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--guidellm", help="the guidellm executable (absent: skipped)")
    parser.add_argument("--aiperf", help="the aiperf executable (absent: skipped)")
    parser.add_argument("--llmbench", help="the llmbench command (default: this python -m llmbench)")
    parser.add_argument(
        "--workers",
        default="",
        help="llmbench's backend.workers, a client each (1,2: llmbench-w1, llmbench-w2)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streams", default="1,64,512", help="fidelity stream counts ('' for none)")
    parser.add_argument("--capacity-streams", default="128,256", help="capacity stream counts ('' for none)")
    parser.add_argument("--clients", default="reference,llmbench,guidellm,aiperf")
    parser.add_argument("--out", type=Path, default=REPO / "docs/measurements/cpu/client_fidelity.json")
    args = parser.parse_args()
    wanted = args.clients.split(",")
    workers = [w for w in args.workers.split(",") if w]
    clients = [
        c for c in make_clients(args.guidellm, args.aiperf, args.llmbench, workers) if c.kind in wanted
    ]
    for client in clients:
        if client.executable is None:
            print(f"{client.name}: no executable given or found; skipped", file=sys.stderr)
    clients = [c for c in clients if c.executable is not None]
    plan = [(FIDELITY, int(s), requests_for(int(s)), "fidelity") for s in args.streams.split(",") if s]
    plan += [(CAPACITY, int(s), 8 * int(s), "capacity") for s in args.capacity_streams.split(",") if s]
    results = {"fidelity": [], "capacity": []}
    host = host_facts()  # before the runs: the commit they ran and the load they started under
    started = time.time()
    keys = ("median_ttft_error_ms", "mean_itl_error_ms", "output_tokens_per_s", "load_average_1m")

    def write(complete: bool) -> dict:
        """The file as it stands, rewritten after every run: a call cut short keeps the runs it made."""
        document = {
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "host": host,
            "complete": complete,
            "minutes": round((time.time() - started) / 60, 1),
            "mock": {"fidelity": vars(FIDELITY), "capacity": vars(CAPACITY)},
            "fidelity": summarize(results["fidelity"], keys),
            "capacity": best_capacity(results["capacity"]),
            "runs": results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1) + "\n")
        return document

    with tempfile.TemporaryDirectory(prefix="client-fidelity-") as tmp:
        for round_ in range(args.rounds):
            for settings, streams, requests, kind in plan:
                order = clients[round_ % len(clients) :] + clients[: round_ % len(clients)]
                for client in order:
                    work = Path(tmp) / f"{kind}-{streams}-{client.name}-{round_}"
                    run = one_run(client, settings, streams, requests, work)
                    results[kind].append(run | {"round": round_})
                    print(f"round {round_} {kind} {client.name} @ {streams}: {_brief(run)}", flush=True)
                    write(complete=False)
    document = write(complete=True)
    print_table(document["fidelity"], document["capacity"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
