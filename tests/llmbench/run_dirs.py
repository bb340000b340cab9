"""Synthetic run directories written to the result-file contract, so report tests do not need the engine."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import msgspec
import numpy as np

from llmbench.config.schema import SloConfig
from llmbench.device.machine import Environment
from llmbench.metrics.requests import compute_metrics
from llmbench.metrics.steps import summarize_steps
from llmbench.results.metrics import file_metrics
from llmbench.results.records import RequestRecord
from llmbench.run.summary import build_summary

STEP_S = 0.01
PERCENTILES = [50.0, 90.0, 95.0, 99.0]
ENVIRONMENT = {"python": "3.11", "platform": "Linux", "cpu": "test cpu", "torch": "2.13", "gpu": None}


def request_rows(
    num_requests: int, seed: int, slowdown: float = 1.0, prompt: str | None = None
) -> list[dict]:
    """A warm-up request, `num_requests` measured ones (one delivering a chunk of 3 tokens at once)
    and one that failed; `prompt` becomes the first measured request's prompt text."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(num_requests + 2):
        warmup, failed = i == 0, i == num_requests + 1
        submit = 0.02 * i
        output_len = 0 if failed else int(rng.integers(2, 12))
        first = submit + slowdown * (0.03 + 0.02 * rng.random())
        times = [first + slowdown * STEP_S * k for k in range(output_len)]
        if i == 1 and output_len >= 4:
            times[1:4] = [times[3]] * 3
        rows.append(
            RequestRecord(
                id=f"req-{i}",
                trial=0,
                warmup=warmup,
                prompt_len=int(rng.integers(4, 40)),
                output_len=output_len,
                submit_time=submit,
                first_token_time=None if failed else first,
                token_times=times,
                finish_reason="error" if failed else "length",
                error="prompt token id 99999 outside the vocabulary" if failed else None,
            ).fields_dict()
        )
    if prompt is not None:
        rows[1]["prompt"] = prompt
    return rows


def step_rows(end_time: float, gpu: bool, slowdown: float = 1.0) -> list[dict]:
    rows = []
    for step in range(int(end_time / STEP_S) + 1):
        t_start = step * STEP_S
        running = 1 + step % 7
        cpu = {"schedule_ms": 0.3, "prepare_ms": 0.8, "sample_ms": 0.4, "output_ms": 0.2, "ipc_ms": 0.0}
        rows.append(
            {
                "trial": 0,
                "step": step,
                "t_start": t_start,
                "t_end": t_start + STEP_S * 0.95,
                "num_prefill_tokens": 16 if step % 5 == 0 else 0,
                "num_decode_seqs": running,
                "num_running": running,
                "num_waiting": step % 3,
                "num_blocks_used": 2 * running,
                "num_preempted": 0,
                "num_steps": 1,
                **{k: v * slowdown for k, v in cpu.items()},
                "gpu_ms": 7.5 * slowdown if gpu else math.nan,
            }
        )
    return rows


def make_run_dir(
    path: Path,
    name: str = "synthetic",
    num_requests: int = 12,
    seed: int = 0,
    gpu: bool = False,
    slowdown: float = 1.0,
    prompt: str | None = None,
    complete: bool = True,
) -> Path:
    """Write requests.jsonl, steps.csv and config.yaml; summary.json too unless the run is incomplete."""
    path.mkdir(parents=True)
    requests = request_rows(num_requests, seed, slowdown, prompt)
    end = max(t for r in requests for t in r["token_times"])
    steps = step_rows(end, gpu, slowdown)
    config = {"name": name, "output": {"percentiles": PERCENTILES}, "slo": {"ttft_ms": 45.0}}
    (path / "config.yaml").write_text(json.dumps(config))
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    with open(path / "steps.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(steps[0]))
        writer.writeheader()
        writer.writerows(steps)
    if complete:
        records = [RequestRecord.from_dict({k: v for k, v in r.items() if k != "prompt"}) for r in requests]
        metrics = compute_metrics(records, PERCENTILES, SloConfig(ttft_ms=45.0))
        summary = build_summary(
            name,
            True,
            "2025-01-01T00:00:00+00:00",
            config,
            Environment(**ENVIRONMENT),
            [metrics],
            summarize_steps(steps),
        )
        (path / "summary.json").write_text(json.dumps(summary.to_dict()))
    return path


def metrics_with(**figures: float) -> dict:
    """A metrics object as a file has it (every key), no request measured but `figures`."""
    return file_metrics(msgspec.to_builtins(compute_metrics([], PERCENTILES, None))) | figures


def write_ablation(path: Path, throughputs: dict[str, float]) -> None:
    """ablation.json: all off, then toggles switched on one at a time in order, then all on, each
    variant with its output throughput and the run's other figures."""
    summary = json.loads((path / "summary.json").read_text())
    order = [name for name in throughputs if name not in ("all off", "all on")]
    variants, enabled = [], {}
    for name, throughput in throughputs.items():
        if name == "all on":
            enabled = dict.fromkeys(order, True)
        elif name != "all off":
            enabled = {**enabled, name: True}
        toggles = {toggle: enabled.get(toggle, False) for toggle in order}
        metrics = summary["metrics"] | {"output_throughput": throughput}
        steps = summary["steps"]
        variants.append({"name": name, "toggles": toggles, "metrics": metrics, "steps": steps, "run_dir": ""})
    ablation = {"command": "llmbench ablate", "order": order, "complete": True, "variants": variants}
    (path / "ablation.json").write_text(json.dumps(ablation))


def visible(html: str) -> str:
    """The page without its scripts and chart data: what the reader sees as text."""
    return re.sub(r"<script.*?</script>", "", html, flags=re.S)


def chart_specs(html: str) -> list[dict]:
    return [
        json.loads(s)
        for s in re.findall(r'<script type="application/json" class="chart-spec"[^>]*>(.*?)</script>', html)
    ]


def study_dir(root: Path, kind: str, labels: list[str]) -> Path:
    """An ablation or sweep directory as the CLI writes it: one run directory per variant or rate."""
    root.mkdir()
    entries = []
    for i, label in enumerate(labels):
        run_dir = make_run_dir(root / f"{i:02d}-{label}", name="study", seed=i, slowdown=1 + i / 4)
        summary = json.loads((run_dir / "summary.json").read_text())
        entry = {"run_dir": run_dir.name, "metrics": summary["metrics"], "steps": summary["steps"]}
        if kind == "ablation":
            entry.update(name=label, toggles={"chunked_prefill": i > 0, "prefix_caching": i > 1})
        else:
            entry.update(rate=float(label), label=label)
        entries.append(entry)
    (root / "summary.json").write_text((root / entries[-1]["run_dir"] / "summary.json").read_text())
    study = {"command": f"llmbench {kind}", "complete": True}
    if kind == "ablation":
        study |= {"order": ["chunked_prefill", "prefix_caching"], "variants": entries}
    else:
        study |= {"points": entries}
    (root / f"{kind}.json").write_text(json.dumps(study))
    return root
