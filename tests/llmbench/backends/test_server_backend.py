import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from llmbench.backends.factory import make_backend
from llmbench.backends.server import free_port
from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.report import write_report
from llmbench.report.sections.ttft_split import PARTS, request_split
from llmbench.results.files import load_steps
from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark

# the tiny model's real forward pass on the CPU, as `llmbench serve` runs it
RUN = {
    "name": "served",
    "model": {"preset": "tiny", "device": "cpu", "dtype": "float32"},
    "engine": {"max_num_seqs": 4},
    "workload": {
        "num_requests": 10,
        "warmup_requests": 2,
        "input": {"dist": "uniform", "min": 3, "max": 30},
        "output": {"dist": "uniform", "min": 1, "max": 10},
    },
    "output": {"report": False, "save_tokens": True},
}
COUNTS = ("completed", "failed", "total_input_tokens", "total_output_tokens")


def counts(run_dir):
    metrics = RunSummary.load(run_dir).to_dict()["metrics"]
    lengths = {r.id: r.output_len for r in load_requests(run_dir) if not r.warmup}
    return {k: metrics[k] for k in COUNTS}, lengths


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("bundled") / "run"
    run_benchmark(parse_config(RUN), run_dir)
    return run_dir


def group_gone(pid):
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_split_server_matches_bundled_and_leaves_no_process(tmp_path, bundled):
    config = parse_config(RUN, ["backend.type=server", "engine.process_split=true"])
    backend = make_backend(config)
    pid = backend._process.pid
    run_benchmark(config, tmp_path / "run", backend=backend, check=True)
    assert counts(tmp_path / "run") == counts(bundled)
    assert group_gone(pid)  # the server and its engine core
    # the server's engine steps reach the run as in-process (the warm-up's drained away): every
    # timed prompt token prefilled once, the step summary filled in
    runs = (tmp_path / "run", bundled)
    prefilled = [sum(row["num_prefill_tokens"] for row in load_steps(run)) for run in runs]
    assert prefilled[0] == prefilled[1] == RunSummary.load(bundled).to_dict()["metrics"]["total_input_tokens"]
    assert RunSummary.load(tmp_path / "run").to_dict()["steps"]["num_steps"] > 0
    served = {r.id: r for r in load_requests(tmp_path / "run")}
    local = {r.id: r for r in load_requests(bundled)}
    # greedy on the same weights: the ids the chunks carried (return_token_ids) are the bundled run's,
    # in order; a token whose text the detokenizer held back comes in no chunk and is counted from usage
    for key, record in served.items():
        shown = [t for t in record.output_token_ids if t != -1]
        remaining = iter(local[key].output_token_ids)
        assert shown and all(t in remaining for t in shown), key
    for record in served.values():
        split_ms = request_split(record)
        ttft_ms = (record.first_token_time - record.submit_time) * 1000
        assert sum(split_ms[name] for name, *_ in PARTS) == pytest.approx(ttft_ms)
        assert split_ms["queueing"] >= 0 and split_ms["prefill"] >= 0
    html = write_report([tmp_path / "run"], tmp_path / "report").read_text()
    assert "TTFT split (client × server)" in html and "Requests joined: served 10." in html
    assert "The slowest first tokens, split" in html


def test_cli_run_with_backend_server_in_process(tmp_path, bundled):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**RUN, "backend": {"type": "server"}}))
    args = ["run", str(path), "--out", str(tmp_path / "run"), "--set", "engine.process_split=false"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert counts(tmp_path / "run") == counts(bundled)


def test_openai_backend_against_a_separate_llmbench_serve(tmp_path, bundled):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(RUN))
    port = free_port()
    command = [sys.executable, "-m", "llmbench", "serve", str(path), "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/v1"
        config_args = ["backend.type=openai", f"backend.url={url}"]
        run_benchmark(parse_config(RUN, config_args), tmp_path / "run")
        # chat: the prompts as text of the same token counts, through the server's chat template
        chat = ["backend.endpoint=chat", "backend.prompt_format=text"]
        run_benchmark(parse_config(RUN, [*config_args, *chat]), tmp_path / "chat")
    finally:
        server.terminate()
        server.wait(30)
    assert counts(tmp_path / "run") == counts(bundled)
    # chat counts the prompts as the server did, its template's tokens included; the planned ones stay
    (chat_counts, chat_lengths), (local_counts, local_lengths) = counts(tmp_path / "chat"), counts(bundled)
    assert chat_lengths == local_lengths
    assert chat_counts["total_input_tokens"] > local_counts["total_input_tokens"]
    assert {**chat_counts, "total_input_tokens": 0} == {**local_counts, "total_input_tokens": 0}
    chat_rows = [r for r in load_requests(tmp_path / "chat") if not r.warmup]
    assert sum(r.planned_prompt_len for r in chat_rows) == local_counts["total_input_tokens"]


def test_a_server_that_cannot_start_exits_2_with_its_reason(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**RUN, "backend": {"type": "server"}, "model": {"preset": "nope"}}))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: run.yaml: backend.type server: llmbench serve exited with code 2")
    assert "nope" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def children(pid):
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            found.append(int(status.parent.name))
    return found


def wait_for(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_server_outlives_an_interrupted_or_killed_run(tmp_path, sig):
    path = tmp_path / "run.yaml"
    slow = {**RUN, "workload": {**RUN["workload"], "num_requests": 10_000, "max_concurrency": 2}}
    path.write_text(yaml.safe_dump({**slow, "backend": {"type": "server"}}))
    command = [sys.executable, "-m", "llmbench", "run", str(path), "--out", str(tmp_path / "run")]
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (tmp_path / "run" / "requests.jsonl").is_file(), 120)  # serving
        (server,) = [pid for pid in children(run.pid) if "serve" in Path(f"/proc/{pid}/cmdline").read_text()]
        run.send_signal(sig)
        assert run.wait(60) == (130 if sig == signal.SIGINT else -signal.SIGKILL)
        assert wait_for(lambda: group_gone(server), 30)  # the server and, split, its engine core
    finally:
        run.kill()
