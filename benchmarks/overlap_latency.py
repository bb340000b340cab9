"""Token latency and host cost of each way the engine overlaps the host with the device: single step,
async output, async scheduling, 8-step windows bursty (stream_multi_step off) and streamed. Per mode
and batch size (all requests at once, 128 prompt and 256 output tokens each): output throughput,
median TPOT and median ITL (gaps between distinct token arrivals, as llmbench's metrics count them,
an arrival being the return of the engine step that handed the token out), their ratio, and the
median host ms per step and per forward from the step records.
    python benchmarks/overlap_latency.py --gpu --out runs/h200/overlap_latency.json
    python benchmarks/overlap_latency.py --null --out runs/cpu/overlap_modes_null.json

Takes about 10 s with --null and about 30 s for the tiny model at --batches 1,16 on the 2-core CPU (at a
load average of 17); --gpu adds a model load per mode. Writes --out FILE; the published ones are
docs/measurements/cpu/overlap_modes_null.json, docs/measurements/cpu/overlap_latency_tiny.json and
docs/measurements/h200/overlap_latency.json."""

import argparse
import json
import logging
import platform
import statistics
import time
from pathlib import Path

import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams

from llmbench.metrics.requests import arrival_gaps

logger = logging.getLogger(__name__)

MODES = {
    "single step": {},
    "async output": {"async_output": True},
    "async scheduling": {"async_scheduling": True},
    "bursty N=8": {"num_scheduler_steps": 8, "stream_multi_step": False},
    "streamed N=8": {"num_scheduler_steps": 8, "stream_multi_step": True},
    "streamed N=8 + async output": {"num_scheduler_steps": 8, "async_output": True},
}
PROMPT, OUTPUT = 128, 256


def model_config(kind: str) -> ModelConfig:
    if kind == "gpu":
        return ModelConfig(preset="llama3-8b", device="cuda", dtype="bfloat16")
    if kind == "null":
        return ModelConfig(preset="llama3-8b", executor="null")
    return ModelConfig(preset="tiny", device="cpu", dtype="float32")


def measure(engine: LLMEngine, batch: int, output: int, gpu: bool) -> dict:
    params = SamplingParams(max_tokens=output, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"{batch}-{i}", list(range(1, PROMPT + 1)), params)
    arrivals: dict[str, list[float]] = {f"{batch}-{i}": [] for i in range(batch)}
    engine.drain_step_records()
    start = time.perf_counter()
    while engine.has_unfinished():
        outputs = engine.step()
        now = time.perf_counter()
        for o in outputs:
            arrivals[o.request_id] += [now] * len(o.new_token_ids)
    wall = time.perf_counter() - start
    if gpu:
        torch.cuda.synchronize()
    records = [r for r in engine.drain_step_records() if r.num_decode_seqs == batch]
    host = [r.schedule_ms + r.prepare_ms + r.output_ms + r.ipc_ms for r in records]
    tpots = [(t[-1] - t[0]) / (len(t) - 1) * 1e3 for t in arrivals.values()]
    itls = [gap * 1e3 for t in arrivals.values() for gap in arrival_gaps(t)]
    forwards = sum(r.num_steps for r in records)
    return {
        "batch": batch,
        "output_throughput": sum(len(t) for t in arrivals.values()) / wall,
        "median_tpot_ms": statistics.median(tpots),
        "median_itl_ms": statistics.median(itls),
        "itl_over_tpot": statistics.median(itls) / statistics.median(tpots),
        "host_ms_per_step": statistics.median(host) if host else None,
        "host_ms_per_forward": sum(host) / forwards if forwards else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--gpu", action="store_true", help="Llama-3-8B shapes on CUDA, graphs on")
    where.add_argument("--null", action="store_true", help="the null executor: host cost alone")
    parser.add_argument("--batches", default="1,256")
    parser.add_argument("--output", type=int, default=OUTPUT, help="output tokens per request")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    kind = "gpu" if args.gpu else "null" if args.null else "tiny"
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for mode, toggles in MODES.items():
        config = EngineConfig(
            model=model_config(kind),
            max_num_seqs=max(batches),
            max_model_len=1024,
            cuda_graphs=args.gpu,
            **toggles,
        )
        engine = LLMEngine(config)
        measure(engine, min(batches), 16, args.gpu)  # warm-up
        for batch in batches:
            row = {"mode": mode, **toggles, **measure(engine, batch, args.output, args.gpu)}
            logger.info("%s", {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
            rows.append(row)
        engine.shutdown()
        del engine
        if args.gpu:
            torch.cuda.empty_cache()
    if args.out:
        command = "python benchmarks/overlap_latency.py" + (f" --{kind}" if kind != "tiny" else "")
        result = {
            "command": f"{command} --batches {args.batches} --output {args.output} --out {args.out}",
            "cpu": platform.processor() or platform.machine(),
            "device": torch.cuda.get_device_name() if args.gpu else f"{kind} on the CPU",
            "prompt_tokens": PROMPT,
            "output_tokens": args.output,
            "rows": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
