"""Host time per engine step with 256 sequences decoding, null executor (no model forward, but the model
runner's own input preparation into host buffers), single-step and 8 scheduler steps: the CPU-overhead
figures of the engine core.
    python scripts/cpu_overhead.py --out results/cpu/cpu_overhead.json"""

import argparse
import json
import platform
import statistics
from pathlib import Path

from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.request import SamplingParams

NUM_SEQS, FORWARDS = 256, 400


def measure(num_scheduler_steps: int) -> dict:
    engine = LLMEngine(
        EngineConfig(
            model=ModelConfig(preset="llama3-8b", executor="null"),
            max_num_seqs=NUM_SEQS,
            max_model_len=4096,
            num_scheduler_steps=num_scheduler_steps,
        )
    )
    for i in range(NUM_SEQS):
        engine.add_request(str(i), list(range(1, 129)), SamplingParams(max_tokens=3000, ignore_eos=True))
    for _ in range(5):  # prefill and warm-up
        engine.step()
    engine.drain_step_records()
    for _ in range(FORWARDS // num_scheduler_steps):
        engine.step()
    records = [r for r in engine.drain_step_records() if r.num_decode_seqs == NUM_SEQS]

    def median(field: str) -> float:
        return statistics.median(getattr(r, field) for r in records)

    host = statistics.median(r.schedule_ms + r.prepare_ms + r.output_ms + r.ipc_ms for r in records)
    return {
        "num_scheduler_steps": num_scheduler_steps,
        "decode_steps": len(records),
        "host_ms_per_step": host,
        "host_ms_per_forward": host / num_scheduler_steps,
        **{f"{phase}_ms": median(f"{phase}_ms") for phase in ("schedule", "prepare", "output", "sample")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [measure(1), measure(8)]
    for row in rows:
        print(
            f"num_scheduler_steps={row['num_scheduler_steps']}: {row['host_ms_per_step']:.3f} ms/step, "
            f"{row['host_ms_per_forward']:.3f} ms/forward; schedule {row['schedule_ms']:.3f}, prepare "
            f"{row['prepare_ms']:.3f}, output {row['output_ms']:.3f} (medians over {row['decode_steps']} steps)"
        )
    if args.out:
        result = {
            "command": "python scripts/cpu_overhead.py --out " + str(args.out),
            "cpu": platform.processor() or platform.machine(),
            "num_seqs": NUM_SEQS,
            "rows": rows,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
