"""Host time of single CUDA calls inside an engine step, against the same calls in a tight loop: an
all-off decode of 256 sequences (Llama-3-8B shapes, graphs on), each call timed where the engine makes
its input copy, medians over 300 steps. Writes the medians in us.

    python scripts/h200_call_costs.py results/h200/call_costs.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.input_batch import InputBuffers
from llmbench.engine.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams

from llmbench.env import command_line

STEPS = 300
timings: dict[str, list[int]] = {}


def timed(name: str, call) -> None:
    start = time.perf_counter_ns()
    call()
    timings.setdefault(name, []).append(time.perf_counter_ns() - start)


def probed_send(self: InputBuffers) -> None:
    """InputBuffers._send with each call timed, then the other ways to record the same event."""
    self.packed = self._views[2]
    host = self._host_views[self._turn][3]
    event, stream = self._copied[self._turn], self._stream
    timed("copy_ (pinned to device)", lambda: self.packed.copy_(host, non_blocking=True))
    timed("Event.record() first", event.record)
    timed("Event.record() again", event.record)
    timed("Event.record(stream)", lambda: event.record(stream))
    timed("torch.cuda.current_stream()", torch.cuda.current_stream)
    timed("Event.query()", event.query)


def medians_us() -> dict[str, float]:
    return {name: statistics.median(values) / 1e3 for name, values in timings.items()}


def main(out: Path) -> None:
    InputBuffers._send = probed_send
    model = ModelConfig(preset="llama3-8b", device="cuda", dtype="bfloat16")
    config = EngineConfig(
        model=model,
        max_num_seqs=256,
        max_model_len=2048,
        num_scheduler_steps=1,
        async_output=False,
        async_scheduling=False,
    )
    engine = LLMEngine(config)
    for i in range(256):
        engine.add_request(str(i), list(range(1, 129)), SamplingParams(max_tokens=1500, ignore_eos=True))
    for _ in range(20):
        engine.step()
    timings.clear()
    for _ in range(STEPS):
        engine.step()
    in_step = medians_us()
    timings.clear()
    inputs = engine.executor.inputs
    with torch.inference_mode():
        torch.cuda.synchronize()
        for _ in range(STEPS):
            probed_send(inputs)
        torch.cuda.synchronize()
    result = {"command": command_line(), "device": torch.cuda.get_device_name(), "steps": STEPS}
    result |= {"in_step_us": in_step, "tight_loop_us": medians_us()}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
