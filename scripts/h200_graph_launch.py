"""Host time of the decode graph's launch (cudaGraphLaunch, through CUDAGraph.replay) in an all-off decode
of 256 sequences (cpu_overhead.py's steady decode engine on CUDA), with dependent launch on and off: each
replay timed inside the engine's steps (medians over STEPS steps), then alone with the GPU idle and with
the replays queued back to back, and the graph's nodes and edges counted (cuda.bindings, when present).

    python scripts/h200_graph_launch.py results/h200/graph_launch.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from cpu_overhead import NUM_SEQS, steady_decode_engine
from llmbench.engine.llm_engine import LLMEngine

from llmbench.env import command_line
from llmbench.step_stats import cpu_ms

STEPS, ALONE = 300, 50


class TimedReplay:
    """Stands in for a captured graph: replays it and keeps each replay's host time in us."""

    def __init__(self, graph: torch.cuda.CUDAGraph):
        self.graph = graph
        self.us: list[float] = []

    def replay(self) -> None:
        start = time.perf_counter_ns()
        self.graph.replay()
        self.us.append((time.perf_counter_ns() - start) / 1e3)


def graph_structure(engine: LLMEngine) -> dict:
    """Nodes by type and edges by type of a fresh capture of the largest bucket's forward."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        return {"error": "cuda.bindings not installed"}
    graphs = engine.executor.graphs
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        graphs.forward(NUM_SEQS)
    torch.cuda.synchronize()
    raw = graph.raw_cuda_graph()
    _, nodes, count = runtime.cudaGraphGetNodes(raw, 0)
    _, nodes, count = runtime.cudaGraphGetNodes(raw, count)
    kinds: dict[str, int] = {}
    for node in nodes:
        _, kind = runtime.cudaGraphNodeGetType(node)
        kinds[kind.name] = kinds.get(kind.name, 0) + 1
    result: dict = {"nodes": count, "node_types": kinds}
    try:
        _, _, _, edge_data, num_edges = runtime.cudaGraphGetEdges(raw, 0)
        _, _, _, edge_data, num_edges = runtime.cudaGraphGetEdges(raw, num_edges)
        ports: dict[str, int] = {}
        for data in edge_data:
            key = f"from_port={data.from_port} type={data.type}"
            ports[key] = ports.get(key, 0) + 1
        result |= {"edges": num_edges, "edge_kinds": ports}
    except Exception as e:  # older bindings: cudaGraphGetEdges without edge data
        result["edges_error"] = repr(e)
    return result


def measure(dependent_launch: bool) -> dict:
    engine = steady_decode_engine(gpu=True, dependent_launch=dependent_launch)
    timed = TimedReplay(engine.executor.graphs.graphs[NUM_SEQS])
    engine.executor.graphs.graphs[NUM_SEQS] = timed
    for _ in range(STEPS):
        engine.step()
    torch.cuda.synchronize()
    records = [r for r in engine.drain_step_records() if r.num_decode_seqs == NUM_SEQS]
    in_step = statistics.median(timed.us)

    def median(field: str) -> float:
        return statistics.median(getattr(r, field) for r in records)

    idle, queued = [], []
    for _ in range(ALONE):
        torch.cuda.synchronize()
        timed.replay()
        idle.append(timed.us[-1])
    torch.cuda.synchronize()
    for _ in range(ALONE):
        timed.replay()
        queued.append(timed.us[-1])
    torch.cuda.synchronize()
    row = {
        "dependent_launch": dependent_launch,
        "steps": len(records),
        "replay_us_in_step": in_step,
        "replay_us_gpu_idle": statistics.median(idle),
        "replay_us_queued": statistics.median(queued),
        "gpu_ms": median("gpu_ms"),
        "schedule_ms": median("schedule_ms"),
        "prepare_ms": median("prepare_ms"),
        "output_ms": median("output_ms"),
        "host_ms": statistics.median(cpu_ms(vars(r)) for r in records),
    }
    try:
        row["graph"] = graph_structure(engine)
    except Exception as e:  # the counts are a side note: the timings stand without them
        row["graph"] = {"error": repr(e)}
    engine.shutdown()
    print(json.dumps(row), flush=True)
    return row


def main(out: Path) -> None:
    rows = [measure(True), measure(False), measure(True), measure(False)]
    result = {"command": f"python scripts/{command_line()}", "device": torch.cuda.get_device_name()}
    result |= {"num_seqs": NUM_SEQS, "rows": rows}
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
